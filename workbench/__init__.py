"""The load-path workbench: load strategies, honest measurement and an attempt ledger.

Importing this package is cheap: registries hold names, and what sits behind a name (a GPU binding,
a peer loader) is imported only when that name is used.
"""
from __future__ import annotations

from workbench.errors import (
    BackendUnavailable,
    CacheStateError,
    FormatError,
    ParamError,
    VerificationError,
    WorkbenchError,
    WorkerFailed,
)
from workbench.formats import open_index
from workbench.formats.index import ExpertBlob, FileIdentity, TensorIndex, TensorInfo
from workbench.formats.synth import write_synthetic
from workbench.io.pagecache import evict_file_pages, prepare, resident_fraction, warm_file
from workbench.io.policy import resolve_eviction
from workbench.ledger import Ledger
from workbench.records import AttemptStats, RunConfig, RunRecord
from workbench.measure.runner import measure
from workbench.registry import Availability
from workbench.strategies import STRATEGIES, Engaged, LoadResult, Placement, Strategy, get_strategy
from workbench.upload import DEVICES, Device, DeviceInfo, open_device
from workbench.verify import verify_placements

__version__ = "0.1.0"

__all__ = [
    "AttemptStats",
    "Availability",
    "BackendUnavailable",
    "CacheStateError",
    "DEVICES",
    "Device",
    "DeviceInfo",
    "Engaged",
    "ExpertBlob",
    "FileIdentity",
    "FormatError",
    "Ledger",
    "LoadResult",
    "ParamError",
    "Placement",
    "RunConfig",
    "RunRecord",
    "STRATEGIES",
    "Strategy",
    "TensorIndex",
    "TensorInfo",
    "VerificationError",
    "WorkbenchError",
    "WorkerFailed",
    "evict_file_pages",
    "get_strategy",
    "measure",
    "open_device",
    "open_index",
    "prepare",
    "resident_fraction",
    "resolve_eviction",
    "verify_placements",
    "warm_file",
    "write_synthetic",
]
