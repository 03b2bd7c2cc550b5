"""Hold a verified cache state up to the moment a load starts: re-read the pages a warm file lost, drop
again the pages a cold one gained — only those pages, and measured before and after.

Why warm needs every page, not 98 % of the file: fast paths gate on the residency of their own range
(``experts``' borrowed blob slices: 90 % of each blob). A file 98.4 % resident can hold one 2.3 MiB blob
at 87 % (75 pages of 4 096 missing, all in that blob, as an expert cache's evictions leave them), and
the gate then sends that blob to the cold path under a warm label.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from workbench.errors import WorkbenchError
from workbench.io.pagecache import evict_file_pages, page_runs, page_size, resident_map, warm_file
from workbench.records.cache_recheck import CacheRecheck


def fill_missing_pages(path: str | os.PathLike) -> int:
    """Read the file's non-resident pages through the page cache; the bytes read."""
    ps, size = page_size(), os.path.getsize(path)
    moved = 0
    for a, b in page_runs(~resident_map(path)):
        nbytes = min(size, b * ps) - a * ps
        warm_file(path, a * ps, nbytes)
        moved += nbytes
    return moved


def _resident(paths: Sequence[str]) -> tuple[float, list[np.ndarray]]:
    maps = [resident_map(p) for p in paths]
    pages = sum(m.size for m in maps)
    return (sum(int(np.count_nonzero(m)) for m in maps) / pages if pages else 1.0), maps


def recheck_model(paths: Sequence[str], state: str, *, warm_min: float, cold_max: float) -> CacheRecheck | None:
    """Look at the model's files once more and put back what moved since the runner's check: warm, every
    missing page re-read (a hole is filled even when the model as a whole still counts as warm); cold,
    the files dropped again when more than ``cold_max`` came back. None for another state, no files, or
    files mincore cannot read (the load itself then says why)."""
    if state not in ("warm", "cold") or not paths:
        return None
    try:
        seen, maps = _resident(paths)
        moved = 0
        if state == "warm" and seen < 1.0:
            moved = sum(fill_missing_pages(p) for p, m in zip(paths, maps) if not m.all())
        elif state == "cold" and seen > cold_max:
            moved = sum(int(np.count_nonzero(m)) for m in maps) * page_size()
            for p in paths:
                evict_file_pages(p)
        now = _resident(paths)[0] if moved else seen
    except (OSError, WorkbenchError):
        return None
    return CacheRecheck(state, seen, now, moved, warm_min if state == "warm" else cold_max)
