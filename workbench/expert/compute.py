"""What a decode session does with a layer's routed experts once they are on the device.

``--compute``:

* ``none`` — nothing: the session measures staging alone;
* ``sleep:MS`` — MS milliseconds per token, spread evenly over its MoE layers (a measured compute
  time standing in for the compute, so overlap has something to hide reads behind);
* ``device`` — each routed expert's matrices multiplied on the device over the bytes just uploaded
  (:meth:`Device.compute <workbench.upload.base.Device.compute>`): a decode step's ``W @ x`` per
  projection, with the expert's real shape. f16/bf16/f32 matrices are computed as they are where
  the library computes that dtype; anything else (a quantized blob, bf16 in numpy) is a *proxy*
  over the same bytes — viewed as the library's proxy dtype and multiplied by as many columns as
  give the real product's FLOP count — and the session's facts say which blobs were proxies.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

from workbench.errors import ParamError
from workbench.formats.index import ExpertBlob, TensorInfo
from workbench.upload.base import Device, DeviceBuffer
from workbench.upload.compute import DTYPE_BYTES, MatmulSpec

COMPUTE_MODES = ("none", "sleep", "device")
_FILE_DTYPES = {"F16": "f16", "BF16": "bf16", "F32": "f32"}


def parse_compute(text: str) -> tuple[str, float]:
    """``none`` → ("none", 0); ``sleep:MS`` → ("sleep", MS); ``device`` → ("device", 0)."""
    mode, _, arg = str(text).partition(":")
    if mode in ("none", "device") and not arg:
        return mode, 0.0
    if mode == "sleep":
        try:
            ms = float(arg)
        except ValueError:
            ms = -1.0
        if ms >= 0 and math.isfinite(ms):
            return mode, ms
    raise ParamError("session", "compute", f"{text!r} is not none, sleep:MS (MS >= 0) or device")


class LayerCompute(Protocol):
    """Runs one layer's compute over the slices just landed: ``(blob index, arena offset, nbytes)``."""

    description: str

    def run(self, arena: DeviceBuffer, landed: Sequence[tuple[int, int, int]]) -> None: ...

    def close(self) -> None: ...


class NoCompute:
    description = "none"

    def run(self, arena: DeviceBuffer, landed: Sequence[tuple[int, int, int]]) -> None:
        return None

    def close(self) -> None:
        return None


class SleepCompute:
    """``ms`` per token, ``ms / layers`` per layer."""

    def __init__(self, ms_per_token: float, layers: int):
        self.per_layer = ms_per_token / 1e3 / max(1, layers)
        self.description = f"sleep {ms_per_token:g} ms per token ({self.per_layer * 1e3:.3g} ms per MoE layer)"

    def run(self, arena: DeviceBuffer, landed: Sequence[tuple[int, int, int]]) -> None:
        if self.per_layer > 0:
            time.sleep(self.per_layer)

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class ExpertMatrix:
    """How one blob's expert slice is multiplied: as it is, or as a same-bytes, same-FLOP proxy."""

    rows: int
    cols: int
    dtype: str  # the compute dtype (f16, bf16, f32)
    batch: int
    file_dtype: str  # as the file stores it (F16, Q4_0, …)
    proxy: bool
    flop_ratio: float  # FLOPs run over the real product's (1.0 when not a proxy)


def expert_matrix(blob: ExpertBlob, tensors: Mapping[str, TensorInfo], native: Sequence[str],
                  proxy_dtype: str) -> ExpertMatrix:
    """The product one expert of ``blob`` makes per decode token, on a library computing ``native``."""
    t = tensors[blob.tensors[0]]
    shape = t.shape[1:] if len(blob.tensors) == 1 and len(t.shape) > 1 else t.shape
    rows, cols = (1, int(shape[0])) if len(shape) == 1 else (int(shape[0]), math.prod(int(s) for s in shape[1:]))
    nbytes = blob.slices[0][1]
    dtype = _FILE_DTYPES.get(t.dtype.upper())
    if dtype in native and rows * cols * DTYPE_BYTES[dtype] == nbytes:
        return ExpertMatrix(rows, cols, dtype, 1, t.dtype, False, 1.0)
    elements = max(1, nbytes // DTYPE_BYTES[proxy_dtype])
    pcols = max(1, min(cols, elements))
    prows = max(1, elements // pcols)
    batch = max(1, round(rows * cols / (prows * pcols)))
    return ExpertMatrix(prows, pcols, proxy_dtype, batch, t.dtype, True, prows * pcols * batch / (rows * cols))


class DeviceFfn:
    """The routed experts' products on the device (see the module docstring)."""

    def __init__(self, device: Device, blobs: Sequence[ExpertBlob], tensors: Mapping[str, TensorInfo]):
        self.engine = device.compute()
        e = self.engine
        self.matrices = [expert_matrix(b, tensors, e.native, e.proxy_dtype) for b in blobs]
        self.description = f"device ({e.name} {e.version}): " + describe_matrices(self.matrices)

    def run(self, arena: DeviceBuffer, landed: Sequence[tuple[int, int, int]]) -> None:
        specs = []
        for blob, at, _ in landed:
            m = self.matrices[blob]
            specs.append(MatmulSpec(at, m.rows, m.cols, m.dtype, m.batch))
        self.engine.matmuls(arena, specs)

    def close(self) -> None:
        self.engine.close()


def describe_matrices(matrices: Sequence[ExpertMatrix]) -> str:
    """``6 blobs F16 as they are; 3 blobs Q4_0 as an f16 proxy (same bytes, batch 4 = 1.12× the FLOPs)``."""
    groups = Counter((m.file_dtype, m.proxy, m.dtype, m.batch, round(m.flop_ratio, 2)) for m in matrices)
    parts = []
    for (fdt, proxy, dt, batch, ratio), n in groups.items():
        if proxy:
            parts.append(f"{n} blobs {fdt} as a same-bytes {dt} proxy (× {batch} columns = {ratio:.2f}× the FLOPs)")
        else:
            parts.append(f"{n} blobs {fdt} as they are")
    return "; ".join(parts)


def open_compute(spec: str, device: Device, blobs: Sequence[ExpertBlob], tensors: Mapping[str, TensorInfo],
                 layers: int) -> LayerCompute:
    """The compute ``spec`` (:func:`parse_compute`) asks for, ready to run."""
    mode, ms = parse_compute(spec)
    if mode == "sleep":
        return SleepCompute(ms, layers)
    if mode == "device":
        return DeviceFfn(device, blobs, tensors)
    return NoCompute()
