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
from workbench.io.identity import cached_json, file_identity, model_identity
from workbench.io.modelcache import (
    FileResidency,
    ModelFiles,
    ModelResidency,
    model_files,
    model_residency,
    prepare_model,
)
from workbench.io.pagecache import (
    evict_file_pages,
    filesystem_type,
    page_size,
    prepare,
    resident_fraction,
    resident_map,
    resident_pages,
    warm_file,
)
from workbench.io.restore import restore_residency
from workbench.io.policy import resolve_eviction
from workbench.io.untouched import iter_untouched, range_checksums

__all__ = [
    "AlignedBuffer", "FileResidency", "ModelFiles", "ModelResidency", "aligned_window", "cached_json",
    "direct_io_support", "evict_file_pages", "file_identity", "filesystem_type", "iter_untouched",
    "logical_block_size", "model_files", "model_identity", "model_residency", "open_direct", "page_size",
    "prepare", "prepare_model", "range_checksums", "read_direct", "resident_fraction", "resident_map",
    "resident_pages", "resolve_eviction", "restore_residency", "warm_file",
]
