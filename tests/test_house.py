"""The house's own rules, checked over the whole package (issue 26): no two modules import each other,
and no module is over 300 lines unless its first lines say why it stays whole."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
MAX_LINES = 300
REASON = "Over 300 lines:"  # a module kept whole says why in a comment starting so, near its top


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every workbench module ``name`` imports, at any depth of its code (function-level and
    TYPE_CHECKING imports count: each is a dependency a reader follows), its own packages left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in modules and m != name
            and not (modules[m].name == "__init__.py" and name.startswith(m + "."))}


def two_module_circles(root: Path = PACKAGE) -> list[tuple[str, str]]:
    modules = _modules(root)
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    return sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, ())})


def long_modules(root: Path = PACKAGE) -> list[str]:
    """Modules over the limit whose first 5 lines give no reason to stay whole."""
    out = []
    for path in _modules(root).values():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES and not any(REASON in line for line in lines[:5]):
            out.append(f"{path.relative_to(root.parent)} ({len(lines)} lines)")
    return out


def test_no_two_modules_import_each_other() -> None:
    assert two_module_circles() == [], "move the piece both need down into a module both import"


def test_no_module_over_300_lines_without_its_reason() -> None:
    assert long_modules() == [], f"split it, or say why it stays whole in a first-lines comment '{REASON} …'"


def test_the_checks_see_a_circle_and_a_long_module(tmp_path: Path) -> None:
    pkg = tmp_path / "workbench"
    (pkg / "room").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "room" / "__init__.py").write_text("")
    (pkg / "room" / "a.py").write_text("from workbench.room import b\n")
    (pkg / "room" / "b.py").write_text("def f():\n    from workbench.room.a import x\n")
    (pkg / "room" / "c.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "room" / "d.py").write_text(f"# {REASON} one parser, one table\n" + "x = 1\n" * MAX_LINES)
    assert two_module_circles(pkg) == [("workbench.room.a", "workbench.room.b")]
    assert long_modules(pkg) == ["workbench/room/c.py (301 lines)"]
