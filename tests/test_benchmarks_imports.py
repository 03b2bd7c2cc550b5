"""Every benchmark script imports only what the product still has: each ``from workbench... import name``
in benchmarks/ — at the top or inside a function, where only a run would find it — names a module or an
attribute that exists. (bench_threads' calibration imported a reader class the house split had moved.)"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _missing(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return False
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return True
    return False


def test_every_workbench_name_a_benchmark_imports_exists():
    gone = []
    for path in sorted(BENCH.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("workbench"):
                gone += [f"{path.name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                         if _missing(node.module, a.name)]
    assert not gone, f"benchmarks import names the product no longer has: {gone}"
