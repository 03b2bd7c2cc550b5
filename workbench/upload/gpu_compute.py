"""Matrix products over a GPU backend's buffers, through torch or cupy, whichever the image has.

The backend allocates with cuda-python (or hip-python) and knows only device addresses; both
libraries adopt foreign device memory through ``__cuda_array_interface__`` (the buffer is wrapped, not
copied), so the products read exactly the bytes the session uploaded. torch is tried first (it
computes bf16), then cupy (f16 and f32; bf16 bytes are then the caller's proxy). The backend's copy
stream is a blocking stream, and the caller synchronizes it before the products, so the libraries'
default streams see the uploads complete; :meth:`matmuls` synchronizes the device after them.
"""
from __future__ import annotations

from typing import Any, Sequence

from workbench.errors import BackendUnavailable
from workbench.upload.base import DeviceBuffer
from workbench.upload.compute import DeviceCompute, MatmulSpec


class _Foreign:
    """A device range as ``__cuda_array_interface__`` (v3, bytes, no stream: the caller synchronizes)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


class TorchCompute(DeviceCompute):
    name = "torch"
    native = ("f16", "bf16", "f32")
    proxy_dtype = "f16"

    def __init__(self, ordinal: int):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch has no GPU here (a CPU build, or no device it can see)")
        self.torch, self.device = torch, torch.device("cuda", ordinal)
        self._dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
        self._wrapped: dict[int, Any] = {}
        self._rhs: dict[tuple[int, int, str], Any] = {}

    @property
    def version(self) -> str:
        return str(self.torch.__version__)

    def matmuls(self, buf: DeviceBuffer, specs: Sequence[MatmulSpec]) -> None:
        base = self._wrap(buf)
        with self.torch.cuda.device(self.device):
            for spec in specs:
                self.check(buf, spec)
                w = base[spec.offset:spec.offset + spec.nbytes].view(self._dtypes[spec.dtype])
                self.torch.matmul(w.view(spec.rows, spec.cols), self._x(spec))
            self.torch.cuda.synchronize(self.device)

    def _wrap(self, buf: DeviceBuffer) -> Any:
        t = self._wrapped.get(buf.ptr)
        if t is None or t.numel() != buf.nbytes:
            t = self._wrapped[buf.ptr] = self.torch.as_tensor(_Foreign(buf.ptr, buf.nbytes), device=self.device)
        return t

    def _x(self, spec: MatmulSpec) -> Any:
        key = (spec.cols, spec.batch, spec.dtype)
        if key not in self._rhs:
            g = self.torch.Generator(device=self.device).manual_seed(0)
            self._rhs[key] = (self.torch.rand((spec.cols, spec.batch), generator=g, device=self.device,
                                              dtype=self.torch.float32) * 0.02 - 0.01).to(self._dtypes[spec.dtype])
        return self._rhs[key]

    def close(self) -> None:
        self._wrapped.clear()
        self._rhs.clear()


class CupyCompute(DeviceCompute):
    name = "cupy"
    native = ("f16", "f32")
    proxy_dtype = "f16"

    def __init__(self, ordinal: int):
        import cupy

        self.cupy, self.ordinal = cupy, ordinal
        self._dtypes = {"f16": cupy.float16, "f32": cupy.float32}
        self._rhs: dict[tuple[int, int, str], Any] = {}
        with cupy.cuda.Device(ordinal):
            cupy.zeros(1)  # fails here, not mid-session, when cupy cannot use the device

    @property
    def version(self) -> str:
        return str(self.cupy.__version__)

    def matmuls(self, buf: DeviceBuffer, specs: Sequence[MatmulSpec]) -> None:
        cp = self.cupy
        with cp.cuda.Device(self.ordinal):
            base = cp.asarray(_Foreign(buf.ptr, buf.nbytes))
            for spec in specs:
                self.check(buf, spec)
                w = base[spec.offset:spec.offset + spec.nbytes].view(self._dtypes[spec.dtype])
                cp.matmul(w.reshape(spec.rows, spec.cols), self._x(spec))
            cp.cuda.Device(self.ordinal).synchronize()

    def _x(self, spec: MatmulSpec) -> Any:
        key = (spec.cols, spec.batch, spec.dtype)
        if key not in self._rhs:
            rng = self.cupy.random.default_rng(0)
            self._rhs[key] = (rng.random((spec.cols, spec.batch)) * 0.02 - 0.01).astype(self._dtypes[spec.dtype])
        return self._rhs[key]

    def close(self) -> None:
        self._rhs.clear()


def open_gpu_compute(backend: str, ordinal: int) -> DeviceCompute:
    """torch, else cupy, on GPU ``ordinal``; BackendUnavailable naming why each could not."""
    reasons = []
    for cls in (TorchCompute, CupyCompute):
        try:
            return cls(ordinal)
        except ImportError as exc:
            reasons.append(f"{cls.name}: not installed ({exc.name or exc})")
        except Exception as exc:  # noqa: BLE001 - a library that imports but cannot drive the device
            reasons.append(f"{cls.name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    raise BackendUnavailable(f"{backend} compute", "; ".join(reasons), "install torch (a GPU build) or cupy")
