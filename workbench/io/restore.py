"""Put a file's pages back the way :func:`~workbench.io.pagecache.resident_map` saw them before."""
from __future__ import annotations

import os

import numpy as np

from workbench.io.pagecache import evict_file_pages, page_runs, page_size, resident_map, warm_file


def restore_residency(path: str | os.PathLike, offset: int, before: np.ndarray) -> None:
    """Put pages back the way :func:`resident_map` ``(path, offset, ...)`` saw them in ``before``.

    Pages resident then but dropped since are read back first, then pages not resident then are
    evicted — in that order, because reading back triggers readahead past what it asked for.
    Eviction works on whole folios (see :func:`evict_file_pages`), so check with :func:`resident_map`
    where exactness matters.
    """
    ps, first = page_size(), offset // page_size()
    for value, fix in ((True, warm_file), (False, evict_file_pages)):
        now = resident_map(path, offset, before.size * ps - offset % ps)
        wrong = (before[: now.size] == value) & (now != value)
        for a, b in page_runs(wrong):
            fix(path, (first + a) * ps, (b - a) * ps)
