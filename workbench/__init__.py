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
from workbench.formats.index import ExpertBlob, FileIdentity, TensorIndex, TensorInfo
from workbench.registry import Availability
from workbench.strategies import STRATEGIES, Engaged, LoadResult, Placement, Strategy, get_strategy
from workbench.upload import DEVICES, Device, DeviceInfo, open_device

__version__ = "0.1.0"

__all__ = [
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
    "LoadResult",
    "ParamError",
    "Placement",
    "STRATEGIES",
    "Strategy",
    "TensorIndex",
    "TensorInfo",
    "VerificationError",
    "WorkbenchError",
    "WorkerFailed",
    "get_strategy",
    "open_device",
]
