"""What a sweep file says: the parsed file (:class:`Sweep`). Its grid points, counted and bounded before
they are made, are :mod:`workbench.cli.sweep.grid`; running them is :mod:`workbench.cli.sweep.execute`;
planning one point's runs is :mod:`workbench.cli.sweep.plan` (all read this module, none is read by it).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from workbench.cli.sweep.grid import check_grid
from workbench.cli.sweep.params import check_document, path_parameters, resolve_paths
from workbench.errors import FormatError, SweepError
from workbench.formats.opening import open_regular_file
from workbench.records import campaign_name_problem

MAX_FILE_BYTES = 2**20
SWEEP_KEYS = {"notebook", "campaign", "description", "hypothesis", "parameters", "grid"}


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
        with open_regular_file(path) as f:  # never waits on a FIFO
            text = f.read(MAX_FILE_BYTES + 1)
        if len(text) > MAX_FILE_BYTES:
            raise SweepError(path, f"larger than the {MAX_FILE_BYTES // 2**20} MiB a sweep file may be "
                                   "(real ones are a few KiB)")
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: 10x faster
    except OSError as exc:
        raise SweepError(path, f"cannot read the sweep file: {exc.strerror or exc}") from exc
    except FormatError as exc:
        raise SweepError(path, f"cannot read the sweep file: {exc.detail}") from None
    except yaml.YAMLError as exc:
        raise SweepError(path, f"not valid YAML: {str(exc).splitlines()[0]}") from exc
    except RecursionError:  # PyYAML's own loader (without libyaml) recurses once per level
        raise SweepError(path, "not valid YAML: nested too deeply") from None
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
    check_grid(path, parameters, grid)  # its points counted and sized before any later step walks them
    problem = campaign_name_problem(doc["campaign"].strip())
    if problem is not None:  # the campaign names data/runs/<campaign>: never '..' or a path
        raise SweepError(path, f"campaign {doc['campaign']!r}: {problem}")
    notebook = find_notebook(doc["notebook"], path)
    kinds = path_parameters(notebook, [*parameters, *grid])
    parameters = resolve_paths(path, parameters, kinds)
    grid = {k: [resolve_paths(path, {k: v}, kinds)[k] for v in values] for k, values in grid.items()}
    return Sweep(path, notebook, doc["campaign"].strip(), parameters, grid,
                 str(doc.get("description") or ""), str(doc.get("hypothesis") or ""))
