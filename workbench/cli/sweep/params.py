"""A sweep's values checked against the notebook's parameters, and its paths resolved, before any point runs.

papermill reads a notebook's ``parameters`` cell: each name, its default as source text, and its type
when the cell annotates one (``runs: int = 3``). A value is checked against the annotation if there is
one, else against the default's own type — ``runs = 3`` takes an integer, ``caches = ["cold"]`` a list of
strings, ``autorun = None`` anything — so a typo'd ``runs: "5"`` fails in one line instead of deep inside
the first point. A parameter is a path when the notebook declares it one (its metadata's
``workbench.path_parameters``: ``{"file": "model", "binaries": "files", "out_dir": "directory", …}``), or,
for a notebook that declares nothing about it, when its name says so (``file``, ``files``, ``*_file``,
``*_path``, ``*_dir``): a relative one is resolved inside the data root (never outside it, links
followed), an absolute one is kept; a declared model or input file must exist. A model may be a
directory, an index json or any shard of a set (issue 17): it must resolve to one, and a model inside
the data root must have all its files there.
"""
from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from workbench.settings import defaults
from workbench.errors import SweepError, WorkbenchError

_SCALARS: dict[str, tuple[type, ...]] = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
                                         "list": (list, tuple), "dict": (dict,)}


MAX_VALUES = 100_000  # values a sweep file may hold, its aliases expanded (a grid of every strategy: a few hundred)
MAX_TEXT_BYTES = 16 * 2**20  # text a sweep file may hold, its aliases expanded (real ones: a few KiB)


def check_document(sweep_path: Path, doc: Mapping[Any, Any]) -> None:
    """Refuse, in one line, a sweep document no sweep needs: more than :data:`MAX_VALUES` values or
    :data:`MAX_TEXT_BYTES` of text once YAML's aliases are expanded (nine nested aliases of ten make 10⁹:
    every later step walks them all, an alias of its own list makes one without end, and 3,000 aliases of
    a 1 MiB string are 3 GB), or a key that is not a string where names go."""
    seen, text, todo = 0, 0, [doc]
    while todo:
        node = todo.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise SweepError(sweep_path, f"more than {MAX_VALUES:,} values once its YAML aliases are expanded "
                                         "(an alias bomb, or an alias of its own list?)")
        if isinstance(node, str):
            text += len(node)
            if text > MAX_TEXT_BYTES:
                raise SweepError(sweep_path, f"more than {MAX_TEXT_BYTES // 2**20} MiB of text once its YAML "
                                             "aliases are expanded (aliases of a long string?)")
        elif isinstance(node, dict):
            text += sum(len(k) for k in node if isinstance(k, str))
            todo.extend(node.values())
        elif isinstance(node, (list, tuple)):
            todo.extend(node)
    for where, mapping in (("the file", doc), ("'parameters'", doc.get("parameters")), ("'grid'", doc.get("grid"))):
        bad = [k for k in mapping or {} if not isinstance(k, str)] if isinstance(mapping, dict) else []
        if bad:
            raise SweepError(sweep_path, f"key {bad[0]!r} of {where} is not a name (quote it?)")


@dataclass(frozen=True)
class ParamType:
    """What a notebook parameter takes: ``kind`` (bool, int, float, str, list, dict, or any) and, for a
    list whose default holds one scalar type, the type of its items."""

    kind: str
    item: str | None = None

    def accepts(self, value: Any) -> bool:
        if self.kind == "any":
            return True
        if isinstance(value, bool) and self.kind != "bool":
            return False  # YAML's true is no number
        if not isinstance(value, _SCALARS[self.kind]):
            return False
        return self.item is None or all(ParamType(self.item).accepts(v) for v in value)

    def __str__(self) -> str:
        return f"a list of {self.item}" if self.item else {"any": "anything", "int": "an integer"}.get(
            self.kind, f"a {self.kind}")


def param_type(spec: Mapping[str, Any]) -> ParamType:
    """The type of one parameter from papermill's description of it (annotation, else default)."""
    annotated = str(spec.get("inferred_type_name") or "None")
    head = annotated.split("[")[0].strip().lower()
    if head in _SCALARS:
        return ParamType(head)
    try:
        default = ast.literal_eval(str(spec.get("default")))
    except (ValueError, SyntaxError):  # an expression (a call, a name): nothing to check against
        return ParamType("any")
    return type_of(default)


def type_of(default: Any) -> ParamType:
    """What a parameter whose default is ``default`` takes."""
    kind = {bool: "bool", int: "int", float: "float", str: "str", dict: "dict"}.get(type(default))
    if kind is not None:
        return ParamType(kind)
    if isinstance(default, (list, tuple)):
        items = {type_of(v).kind for v in default}
        scalar = items.pop() if len(items) == 1 else None
        return ParamType("list", scalar if scalar in ("bool", "int", "float", "str") else None)
    return ParamType("any")


def check_types(sweep_path: Path, notebook: Path, declared: Mapping[str, Mapping[str, Any]],
                parameters: Mapping[str, Any], grid: Mapping[str, list[Any]]) -> None:
    """Raise SweepError naming the first value the notebook's parameter does not take."""
    checks = [(name, value, "") for name, value in parameters.items()]
    checks += [(name, value, f" (grid value {i + 1})") for name, values in grid.items()
               for i, value in enumerate(values)]
    for name, value, where in checks:
        wanted = param_type(declared[name])
        if not wanted.accepts(value):
            raise SweepError(sweep_path, f"parameter '{name}'{where} = {value!r}: {notebook.name} takes {wanted} "
                                         f"(its default is {declared[name].get('default')})")


PATH_KINDS = {"model": "a model that must exist: a file, a directory, an index json or any shard of a set",
              "file": "a file that must exist",
              "files": "files that must exist", "directory": "a directory", "ledger": "a ledger file",
              "path": "a path"}
MUST_EXIST = ("model", "file", "files")


def path_parameters(notebook: Path, names: Iterable[str] = ()) -> dict[str, str]:
    """The notebook's path parameters and their kinds (:data:`PATH_KINDS`), as its metadata declares
    them (``metadata.workbench.path_parameters``: name → kind), and — a safety net for notebooks that
    declare nothing — every one of ``names`` the old naming rule calls a path (``file``, ``files``,
    ``*_file``, ``*_path``, ``*_dir``). A declaration that is not a mapping of names to known kinds is a
    SweepError naming the notebook."""
    try:
        meta = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {})
    except (OSError, ValueError, AttributeError) as exc:  # AttributeError: JSON that is no object
        raise SweepError(notebook, f"cannot read the notebook: {exc}") from None
    except RecursionError:
        raise SweepError(notebook, "cannot read the notebook: JSON nested too deeply") from None
    declared = (meta.get("workbench") or {}).get("path_parameters") or {}
    if not isinstance(declared, dict) or not all(isinstance(k, str) and v in PATH_KINDS for k, v in declared.items()):
        raise SweepError(notebook, f"metadata.workbench.path_parameters must map parameter names to one of "
                                   f"{', '.join(PATH_KINDS)}; found {str(declared)[:120]}")
    by_name = {n: _kind_by_name(n) for n in names if _kind_by_name(n)}
    return {**by_name, **declared}


def _kind_by_name(name: str) -> str:
    if name in ("file", "files") or name.endswith("_file"):
        return "file"
    return "directory" if name.endswith("_dir") else "path" if name.endswith("_path") else ""


def resolve_path_value(sweep_path: Path, name: str, value: Any) -> Any:
    """``value`` with every path in it resolved: relative → inside the data root (through any link:
    a path that leaves it is refused); absolute → kept; an empty string keeps meaning "the notebook's
    default"."""
    if isinstance(value, (list, tuple)):
        return [resolve_path_value(sweep_path, name, v) for v in value]
    if not isinstance(value, str) or not value.strip():
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    root = defaults.data_root().resolve()
    resolved = (root / path).resolve()
    if resolved != root and root not in resolved.parents:
        raise SweepError(sweep_path, f"parameter '{name}' = {value!r} leaves the data root {root}; "
                                     "give an absolute path to use a file elsewhere")
    return str(resolved)


def resolve_paths(sweep_path: Path, values: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    """The parameters with the values of every path parameter (``kinds``) resolved, others untouched."""
    return {k: resolve_path_value(sweep_path, k, v) if k in kinds else v for k, v in values.items()}


def check_files_exist(sweep_path: Path, parameters: Mapping[str, Any], grid: Mapping[str, list[Any]],
                      kinds: Mapping[str, str]) -> None:
    """The files a sweep names for parameters declared as models or input files must exist before it
    starts; a model may be a directory, an index json or a shard (:func:`check_model`)."""
    values = [(k, v) for k, v in parameters.items()] + [(k, v) for k, vs in grid.items() for v in vs]
    for name, value in values:
        kind = kinds.get(name)
        if kind not in MUST_EXIST:
            continue
        for one in value if isinstance(value, (list, tuple)) else [value]:
            if not isinstance(one, str) or not one:
                continue
            if kind == "model":
                check_model(sweep_path, name, one)
            elif not os.path.isfile(one):
                raise SweepError(sweep_path, f"parameter '{name}': {one}: no such file")


def check_model(sweep_path: Path, name: str, value: str) -> None:
    """``value`` names a model — a file, a directory, an index json or any shard of a set — as the
    formats layer resolves it (stat results and the index's JSON; no model file is opened), and a model
    inside the data root has every file of it there too: a member that leaves it is refused."""
    from workbench.formats.resolve import resolve_model

    if not os.path.exists(value):
        raise SweepError(sweep_path, f"parameter '{name}': {value}: no such file")
    try:
        spec = resolve_model(value)
    except WorkbenchError as exc:
        raise SweepError(sweep_path, f"parameter '{name}': {exc}") from None
    root = defaults.data_root().resolve()
    if not _within(Path(value).resolve(), root):
        return  # an absolute path elsewhere: the user's to name, as for a file
    for member in (*spec.files, spec.index_file):
        if member and not _within(Path(member).resolve(), root):
            raise SweepError(sweep_path, f"parameter '{name}' = {value!r}: its file {member} leaves the data "
                                         f"root {root}; give an absolute path to use a model elsewhere")


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
