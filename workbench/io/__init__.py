"""Host side of the load path: page-cache control, O_DIRECT primitives, untouched reads, file identity,
the eviction policy and environment capture."""
from __future__ import annotations

from workbench.io.direct import (
    AlignedBuffer,
    aligned_window,
    direct_io_support,
    logical_block_size,
    open_direct,
    read_direct,
)
from workbench.io.identity import cached_json, file_identity
from workbench.io.pagecache import (
    evict_file_pages,
    filesystem_type,
    page_size,
    prepare,
    resident_fraction,
    resident_map,
    resident_pages,
    restore_residency,
    warm_file,
)
from workbench.io.policy import resolve_eviction
from workbench.io.untouched import iter_untouched, range_checksums

__all__ = [
    "AlignedBuffer", "aligned_window", "cached_json", "direct_io_support", "evict_file_pages",
    "file_identity", "filesystem_type", "iter_untouched", "logical_block_size", "open_direct",
    "page_size", "prepare", "range_checksums", "read_direct", "resident_fraction", "resident_map",
    "resident_pages", "resolve_eviction", "restore_residency", "warm_file",
]
