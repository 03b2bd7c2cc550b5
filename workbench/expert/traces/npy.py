"""``.npy`` traces: ``(N, 3)`` integer rows (token, layer, expert; or a structured array with those
fields), or a ``[tokens, layers, k]`` integer array (vLLM's routed-experts shape, layer ``i`` the
``i``-th MoE layer; a (token, layer) of all ``-1`` is a gap). The header is read and its shape checked
against the file's size and :data:`~workbench.expert.traces.limits.MAX_IDS` before any array exists.
"""
from __future__ import annotations

import math
import os

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.build import trace_from_records, trace_from_rows
from workbench.expert.traces.limits import MAX_EXPERTS, MAX_K, MAX_LAYER, MAX_POSITION, check_ids
from workbench.expert.traces.trace import Trace

_COLUMNS = ("token", "layer", "expert")
_LIMITS = (MAX_POSITION, MAX_LAYER, MAX_EXPERTS)


def read_npy(path: str) -> Trace:
    """The trace in ``path``; :class:`TraceError` (one line) for anything else."""
    shape, dtype = _header(path)
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    if dtype.names:
        if not set(_COLUMNS) <= set(dtype.names) or any(dtype[c].kind not in "iu" for c in _COLUMNS):
            raise TraceError(path, f"structured array needs integer fields {', '.join(_COLUMNS)}, got {dtype}")
        cols = [np.asarray(arr[c]).ravel() for c in _COLUMNS]
        return _rows(path, cols)
    if dtype.kind not in "iu" or len(shape) not in (2, 3) or (len(shape) == 2 and shape[1] != 3):
        raise TraceError(path, f"expected an integer array of shape (N, 3) (token, layer, expert) or "
                               f"[tokens, layers, k], got {dtype} {shape}")
    if len(shape) == 2:
        return _rows(path, [np.asarray(arr[:, c]) for c in range(3)])
    return _dense(path, np.asarray(arr))


def _header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    """The declared shape and dtype, refused when the file cannot hold them or they exceed the limits."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _fortran, dtype = read(fh)
            offset = fh.tell()
        size = os.path.getsize(path)
    except (OSError, ValueError, SyntaxError) as exc:
        raise TraceError(path, f"not a readable .npy array: {getattr(exc, 'strerror', None) or exc}") from None
    if dtype.hasobject:
        raise TraceError(path, f"holds Python objects ({dtype}), not integers")
    count = math.prod(shape)
    if count * dtype.itemsize > size - offset:
        raise TraceError(path, f"declares shape {shape} of {dtype} ({count * dtype.itemsize:,} bytes) but holds "
                               f"{size - offset:,} bytes of data")
    per_id = 1 if len(shape) == 3 or dtype.names else 3  # (N, 3) rows hold one expert id in three numbers
    check_ids(path, f"shape {shape}", count // per_id)
    return shape, dtype


def _rows(path: str, cols: list[np.ndarray]) -> Trace:
    for name, col, limit in zip(_COLUMNS, cols, _LIMITS):
        if col.size and (col.min() < 0 or col.max() >= limit):
            row = int(np.flatnonzero((col < 0) | (col >= limit))[0])
            raise TraceError(path, f"row {row}: {name} {int(col[row])} out of range (0 .. {limit - 1})")
    return trace_from_rows(path, *(c.astype(np.int64) for c in cols))


def _dense(path: str, arr: np.ndarray) -> Trace:
    tokens, n_layers, k = arr.shape
    if not 1 <= k <= MAX_K or n_layers > MAX_LAYER:
        raise TraceError(path, f"shape {arr.shape}: k must be 1 .. {MAX_K} and layers at most {MAX_LAYER}")
    gap = (arr == -1).all(axis=2) if arr.dtype.kind == "i" else np.zeros(arr.shape[:2], bool)
    bad = ~gap[..., None] & ((arr < 0) | (arr >= MAX_EXPERTS))
    if bad.any():
        t, i, j = (int(x) for x in np.argwhere(bad)[0])
        raise TraceError(path, f"token {t} layer {i}: expert {int(arr[t, i, j])} out of range "
                               f"(0 .. {MAX_EXPERTS - 1}; a gap is all -1)")
    t_idx, l_idx = np.nonzero(~gap)
    return trace_from_records(path, t_idx.astype(np.int64), l_idx.astype(np.int64), arr[t_idx, l_idx], None,
                              layer_kind="ordinal")
