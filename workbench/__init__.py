"""The load-path workbench: load strategies, honest measurement and an attempt ledger.

Importing this package is cheap: the public names below are imported on first use (PEP 562), and
registries hold names, so what sits behind a name (numpy, pandas, a GPU binding, a peer loader) is
imported only when that name is used. ``import workbench`` loads the package and its errors, nothing
else; a worker process and ``workbench --help`` pay only for what they touch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workbench.errors import (
    BackendUnavailable,
    CacheStateError,
    FormatError,
    ParamError,
    VerificationError,
    WorkbenchError,
    WorkerFailed,
)

__version__ = "0.1.0"

# public name → the module it lives in (imported by __getattr__ on first use)
_LAZY = {
    "open_index": "workbench.formats",
    "ExpertBlob": "workbench.formats.index", "FileIdentity": "workbench.formats.index",
    "TensorIndex": "workbench.formats.index", "TensorInfo": "workbench.formats.index",
    "write_synthetic": "workbench.formats.synth",
    "evict_file_pages": "workbench.io.pagecache", "prepare": "workbench.io.pagecache",
    "resident_fraction": "workbench.io.pagecache", "warm_file": "workbench.io.pagecache",
    "prepare_model": "workbench.io.modelcache", "model_residency": "workbench.io.modelcache",
    "model_identity": "workbench.io.identity",
    "resolve_eviction": "workbench.io.policy",
    "Ledger": "workbench.ledger",
    "AttemptStats": "workbench.records", "Engaged": "workbench.records", "RunConfig": "workbench.records",
    "RunRecord": "workbench.records", "WorkerReport": "workbench.records",
    "measure": "workbench.measure.run.runner",
    "verify_placements": "workbench.measure.run.verify",
    "Availability": "workbench.registry",
    "STRATEGIES": "workbench.strategies", "LoadResult": "workbench.strategies",
    "Placement": "workbench.strategies", "Strategy": "workbench.strategies",
    "get_strategy": "workbench.strategies",
    "DEVICES": "workbench.upload", "Device": "workbench.upload", "DeviceInfo": "workbench.upload",
    "open_device": "workbench.upload",
}

__all__ = sorted([
    "BackendUnavailable", "CacheStateError", "FormatError", "ParamError", "VerificationError",
    "WorkbenchError", "WorkerFailed", *_LAZY,
])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # what the names are, for type checkers and editors (never executed)
    from workbench.formats import open_index
    from workbench.formats.index import ExpertBlob, FileIdentity, TensorIndex, TensorInfo
    from workbench.formats.synth import write_synthetic
    from workbench.io.identity import model_identity
    from workbench.io.modelcache import model_residency, prepare_model
    from workbench.io.pagecache import evict_file_pages, prepare, resident_fraction, warm_file
    from workbench.io.policy import resolve_eviction
    from workbench.ledger import Ledger
    from workbench.measure.run.runner import measure
    from workbench.measure.run.verify import verify_placements
    from workbench.records import AttemptStats, Engaged, RunConfig, RunRecord, WorkerReport
    from workbench.registry import Availability
    from workbench.strategies import STRATEGIES, LoadResult, Placement, Strategy, get_strategy
    from workbench.upload import DEVICES, Device, DeviceInfo, open_device
