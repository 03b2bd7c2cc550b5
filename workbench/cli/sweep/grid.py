"""A sweep's grid points, counted and sized before any is made, and made one at a time.

The grid is the cartesian product of its lists, so what a file can ask for grows as a product, not as
its length: six axes of 60 values (360 values, well under the file's value check) are 4.7 × 10¹⁰
points, and 3,000 aliases of one 1 MiB string are 3,000 points of 1 MiB each, 3 GB to hash, name and
print (issue 35 §1). So before anything is built, the grid's work is computed from its lists alone:

- :data:`MAX_POINTS` points (each is one papermill execution, seconds to minutes: 10,000 is days of
  runs; a grid of every strategy is a few hundred);
- :data:`MAX_GRID_BYTES` of parameters over all points: a point carries the fixed parameters and one
  value per axis, each point's are JSON-encoded to name it, and a dry run prints them, so the sum over
  the points is the work every later step does.

:class:`SweepGrid` is then a sequence that makes point ``i`` on demand (``len`` without expanding,
iteration and indexing in ``itertools.product`` order); :func:`check_grid` is run by
:func:`workbench.cli.sweep.spec.load_sweep` too, so a sweep file too big to run is refused as it is read.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from workbench.errors import SweepError

MAX_POINTS = 10_000
MAX_GRID_BYTES = 64 * 2**20
_SLUG_BAD = re.compile(r"[^A-Za-z0-9._=+-]+")
SHOWN_VALUE_CHARS = 60  # a value's part of a point's one-line description


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: the parameters papermill injects and a stable output name."""

    index: int
    params: Mapping[str, Any]
    grid_values: Mapping[str, Any]
    name: str

    def output(self, out_dir: Path) -> Path:
        return out_dir / f"{self.name}.ipynb"


def value_bytes(value: Any) -> int:
    """The size of ``value`` as JSON text, without making it (strings by their UTF-8 length)."""
    todo, total = [value], 0
    while todo:
        node = todo.pop()
        if isinstance(node, str):
            total += len(node.encode("utf-8", "surrogatepass")) + 2
        elif isinstance(node, Mapping):
            total += 2 + sum(len(str(k).encode("utf-8", "surrogatepass")) + 4 for k in node)
            todo.extend(node.values())
        elif isinstance(node, (list, tuple)):
            total += 2 + len(node)
            todo.extend(node)
        else:
            total += len(str(node)) + 1
    return total


def check_grid(path: Path, parameters: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]) -> int:
    """The number of points; SweepError in one line, before any point is made, past either bound."""
    sizes = [len(values) for values in grid.values()]
    count = math.prod(sizes)  # a few hundred small ints at most (the file's value check): exact and instant
    if count > MAX_POINTS:
        shape = " × ".join(str(n) for n in sizes)
        raise SweepError(path, f"its grid makes {count:,} points ({shape}): more than the {MAX_POINTS:,} a "
                               "sweep may run (each point is one notebook execution)")
    total = count * value_bytes(dict(parameters))  # every point carries the fixed parameters,
    for values in grid.values():  # and each value of an axis count / len(axis) times
        total += count // len(values) * sum(value_bytes(v) for v in values)
    if total > MAX_GRID_BYTES:
        raise SweepError(path, f"its {count:,} points carry {total / 2**20:,.0f} MiB of parameters (values "
                               f"repeated by the grid, or YAML aliases of a long one): more than the "
                               f"{MAX_GRID_BYTES // 2**20} MiB a sweep may")
    return count


class SweepGrid(Sequence):
    """The points of a sweep's grid (checked by :func:`check_grid`), each made when asked for."""

    def __init__(self, sweep: Any):  # a spec.Sweep
        self.sweep, self.keys = sweep, list(sweep.grid)
        self._count = check_grid(sweep.path, sweep.parameters, sweep.grid)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i: int) -> SweepPoint:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]  # type: ignore[return-value]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        values, rest = {}, i
        for key in reversed(self.keys):  # the last axis varies fastest, as in itertools.product
            axis = self.sweep.grid[key]
            rest, at = divmod(rest, len(axis))
            values[key] = axis[at]
        values = {k: values[k] for k in self.keys}
        params = {**self.sweep.parameters, **values}
        return SweepPoint(i, params, values, _point_name(self.sweep, values, params))


def expand_grid(sweep: Any) -> SweepGrid:
    """The cartesian product of the grid (in the file's key order) over the fixed parameters, counted
    and bounded first, each point made as it is read."""
    return SweepGrid(sweep)


def _point_name(sweep: Any, values: Mapping[str, Any], params: Mapping[str, Any]) -> str:
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
    """The point's grid values in one short line, e.g. ``file=m.gguf caches=cold`` (a long value cut)."""
    return " ".join(f"{k}={_cut(_slug_value(v))}" for k, v in point.grid_values.items()) or "(fixed parameters)"


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_VALUE_CHARS else f"{text[:SHOWN_VALUE_CHARS - 1]}… ({len(text):,} chars)"
