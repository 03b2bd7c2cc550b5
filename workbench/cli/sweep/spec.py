"""What a sweep file says: the parsed file (:class:`Sweep`), its grid points (:class:`SweepPoint`) and
their stable names. Running them is :mod:`workbench.cli.sweep.execute`; planning one point's runs is
:mod:`workbench.cli.sweep.plan` (both read this module, neither is read by it).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from workbench.cli.sweep.params import check_document, path_parameters, resolve_paths
from workbench.errors import SweepError
from workbench.records import campaign_name_problem

SWEEP_KEYS = {"notebook", "campaign", "description", "hypothesis", "parameters", "grid"}
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._=+-]+")


@dataclass(frozen=True)
class Sweep:
    """A parsed sweep file."""

    path: Path
    notebook: Path
    campaign: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    description: str = ""
    hypothesis: str = ""


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: the parameters papermill injects and a stable output name."""

    index: int
    params: Mapping[str, Any]
    grid_values: Mapping[str, Any]
    name: str

    def output(self, out_dir: Path) -> Path:
        return out_dir / f"{self.name}.ipynb"


def notebooks_dir() -> Path:
    """The notebooks shipped with the workbench: the checkout's ``notebooks/``, else the package copy."""
    package = Path(__file__).resolve().parents[1] / "notebooks"  # workbench/cli/notebooks
    checkout = package.parents[2] / "notebooks"
    return checkout if checkout.is_dir() else package


def find_notebook(name: str, sweep_file: Path) -> Path:
    """Resolve a sweep's ``notebook``: a path (cwd, then beside the sweep file) or a shipped name."""
    base = sweep_file.parent
    candidates = [Path(name), base / name]
    stem = Path(name).name if name.endswith(".ipynb") else f"{Path(name).name}.ipynb"
    candidates.append(notebooks_dir() / stem)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise SweepError(sweep_file, f"notebook '{name}' not found (looked in ., {base} and {notebooks_dir()})")


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Parse and check a sweep file; raises :class:`SweepError` naming the file and the problem."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SweepError(path, f"cannot read the sweep file: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise SweepError(path, f"not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(doc, dict):
        raise SweepError(path, "a sweep file is a mapping with notebook, campaign, parameters and grid")
    check_document(path, doc)  # aliases expanded within bounds, keys that are names
    unknown = sorted(set(doc) - SWEEP_KEYS)
    if unknown:
        raise SweepError(path, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(SWEEP_KEYS))}")
    for key in ("notebook", "campaign"):
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise SweepError(path, f"'{key}' must be a non-empty string")
    parameters, grid = doc.get("parameters") or {}, doc.get("grid") or {}
    if not isinstance(parameters, dict):
        raise SweepError(path, "'parameters' must be a mapping of name: value")
    if not isinstance(grid, dict):
        raise SweepError(path, "'grid' must be a mapping of name: [values]")
    for name, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(path, f"grid '{name}' must be a non-empty list of values")
    both = sorted(set(parameters) & set(grid))
    if both:
        raise SweepError(path, f"{', '.join(both)} both fixed and in the grid; pick one")
    problem = campaign_name_problem(doc["campaign"].strip())
    if problem is not None:  # the campaign names data/runs/<campaign>: never '..' or a path
        raise SweepError(path, f"campaign {doc['campaign']!r}: {problem}")
    notebook = find_notebook(doc["notebook"], path)
    kinds = path_parameters(notebook, [*parameters, *grid])
    parameters = resolve_paths(path, parameters, kinds)
    grid = {k: [resolve_paths(path, {k: v}, kinds)[k] for v in values] for k, values in grid.items()}
    return Sweep(path, notebook, doc["campaign"].strip(), parameters, grid,
                 str(doc.get("description") or ""), str(doc.get("hypothesis") or ""))


def expand_grid(sweep: Sweep) -> list[SweepPoint]:
    """The cartesian product of the grid (in the file's key order) over the fixed parameters."""
    keys = list(sweep.grid)
    points = []
    for i, combo in enumerate(itertools.product(*(sweep.grid[k] for k in keys))):
        values = dict(zip(keys, combo))
        params = {**sweep.parameters, **values}
        points.append(SweepPoint(i, params, values, _point_name(sweep, values, params)))
    return points


def _point_name(sweep: Sweep, values: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    # The name depends on the parameters only (not the point's index), so reordering the grid or
    # adding values keeps finished points findable; the hash separates points whose slugs collide.
    blob = json.dumps({"notebook": sweep.notebook.name, "params": params}, sort_keys=True, default=str)
    digest = hashlib.sha1(blob.encode()).hexdigest()[:8]
    parts = [f"{k}={_slug_value(v)}" for k, v in values.items()]
    slug = _SLUG_BAD.sub("-", "_".join(parts)).strip("-")[:80]
    return "-".join(p for p in (sweep.notebook.stem, slug, digest) if p)


def _slug_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(_slug_value(v) for v in value)
    if isinstance(value, dict):
        return "+".join(f"{k}{_slug_value(v)}" for k, v in value.items())
    if isinstance(value, str) and "/" in value:
        return Path(value).name  # a file: its name reads well; the hash tells two directories apart
    return str(value)


def describe_point(point: SweepPoint) -> str:
    """The point's grid values in one short line, e.g. ``file=m.gguf caches=cold``."""
    return " ".join(f"{k}={_slug_value(v)}" for k, v in point.grid_values.items()) or "(fixed parameters)"
