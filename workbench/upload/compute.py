"""Matrix products over device memory: what a MoE session's ``--compute device`` runs on the experts.

:meth:`Device.compute <workbench.upload.base.Device.compute>` hands out a :class:`DeviceCompute` for
the buffers that device allocated. Each :class:`MatmulSpec` names a matrix lying in a buffer (byte
offset, rows × cols of a dtype) and how many right-hand columns to multiply it by; :meth:`matmuls`
runs them all and returns once the device has finished, so its wall time is the compute time.

Backends: ``host`` computes with numpy (BLAS for f32; numpy's own loops for f16, as slow as numpy
makes them); GPU backends with whichever library the image has and that takes a device pointer
(``__cuda_array_interface__``): torch, else cupy (:mod:`workbench.upload.gpu_compute`). A dtype a
library cannot compute (bf16 in numpy and cupy, every quantized format anywhere) is the caller's
business: it views the same bytes as :attr:`DeviceCompute.proxy_dtype` instead and says so.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from workbench.upload.buffer import DeviceBuffer

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4}


@dataclass(frozen=True)
class MatmulSpec:
    """``W @ X``: W is ``rows × cols`` of ``dtype`` at byte ``offset`` of a buffer (row-major), X is
    ``cols × batch`` of the same dtype (decode: batch 1; a same-FLOP proxy may need more columns)."""

    offset: int
    rows: int
    cols: int
    dtype: str
    batch: int = 1

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * DTYPE_BYTES[self.dtype]

    @property
    def flops(self) -> int:
        return 2 * self.rows * self.cols * self.batch


class DeviceCompute(ABC):
    """Runs :class:`MatmulSpec` products over one device's buffers."""

    name: ClassVar[str]  # the library: numpy, torch, cupy
    native: ClassVar[tuple[str, ...]]  # dtypes it computes as they are
    proxy_dtype: ClassVar[str]  # what other bytes are viewed as

    @property
    def version(self) -> str:
        return ""

    @abstractmethod
    def matmuls(self, buf: DeviceBuffer, specs: Sequence[MatmulSpec]) -> None:
        """Run every product and return when the device has finished them."""

    def close(self) -> None:
        """Drop what the products kept (right-hand sides, wrapped buffers)."""

    def check(self, buf: DeviceBuffer, spec: MatmulSpec) -> None:
        if spec.dtype not in self.native:
            raise ValueError(f"{self.name} does not compute {spec.dtype}; view the bytes as {self.proxy_dtype}")
        if spec.offset < 0 or spec.offset + spec.nbytes > buf.nbytes or spec.offset % DTYPE_BYTES[spec.dtype]:
            raise ValueError(f"{spec} does not lie (aligned) inside {buf!r}")


class NumpyCompute(DeviceCompute):
    """numpy over the host backend's buffers (their ``handle`` is the uint8 array)."""

    name = "numpy"
    native = ("f16", "f32")
    proxy_dtype = "f32"

    def __init__(self) -> None:
        self._rhs: dict[tuple[int, int, str], np.ndarray] = {}

    @property
    def version(self) -> str:
        return np.__version__

    def matmuls(self, buf: DeviceBuffer, specs: Sequence[MatmulSpec]) -> None:
        arr = buf.handle
        with np.errstate(all="ignore"):  # a proxy's bytes are not numbers of its dtype: NaN and inf are fine
            for spec in specs:
                self.check(buf, spec)
                w = arr[spec.offset:spec.offset + spec.nbytes].view(_NUMPY[spec.dtype]).reshape(spec.rows, spec.cols)
                np.matmul(w, self._x(spec))

    def _x(self, spec: MatmulSpec) -> Any:
        key = (spec.cols, spec.batch, spec.dtype)
        x = self._rhs.get(key)
        if x is None:  # small values: a product of random weights stays finite
            x = np.random.default_rng(0).uniform(-0.01, 0.01, (spec.cols, spec.batch)).astype(_NUMPY[spec.dtype])
            self._rhs[key] = x
        return x

    def close(self) -> None:
        self._rhs.clear()


_NUMPY = {"f16": np.float16, "f32": np.float32}
