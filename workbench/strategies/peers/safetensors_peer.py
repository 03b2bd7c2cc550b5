"""``peer-safetensors``: the safetensors package's own reader, ``safe_open`` then ``get_tensor`` for
every tensor in file order.

A sharded checkpoint is read as transformers reads one: each shard opened on its own, in the model's
order, its tensors taken, the shard closed before the next.

``framework=pt`` is the README way onto a GPU: ``safe_open(path, framework="pt", device="cuda:N")``,
each ``get_tensor`` a fresh CUDA allocation filled from the file mapping, adopted as the placement. On
the host backend (``device="cpu"``) the ``mmap`` backend's tensors are lazy views of the file mapping
with nothing read yet, so the workbench copies them into device buffers inside the window (that copy
is where the file is read); ``io=pread`` tensors are private copies and are adopted.

``framework=numpy`` has no way onto a GPU: ``get_tensor`` returns a private array the library read;
on the host backend it is adopted, on a GPU the workbench copies it (a pageable host→device copy, what
any numpy-based engine has to do). numpy has no bfloat16, so ml_dtypes must be imported first (it gives
numpy the name safetensors asks for); F8, F4 and F6 tensors cannot be held by numpy at all, and F6 by
no framework. ``framework=auto`` is pt when torch is installed, else numpy.
"""
from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Iterator, Mapping

from workbench.errors import FormatError
from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.strategies.base import BaseParams, LoadContext, check_param
from workbench.strategies.peers.common import (
    INSTALL_TORCH, PeerStrategy, adopt_tensor, copy_tensor, on_host, probe_modules, torch_device,
    version_tuple,
)
from workbench.upload.base import Device

NAME = "peer-safetensors"
FRAMEWORKS = ("auto", "pt", "numpy")
IOS = ("mmap", "pread")  # safe_open(backend=...): mmap is the library's default; pread since 0.8
# What numpy can hold (BF16 only with ml_dtypes imported); the F8, F4 and F6 codes it cannot.
NUMPY_CODES = frozenset({"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
                         "F16", "BF16", "F32", "F64", "C64"})
NO_FRAMEWORK_CODES = frozenset({"F6_E2M3", "F6_E3M2"})  # safetensors indexes them; no framework reads them


@dataclass(frozen=True)
class SafetensorsPeerParams(BaseParams):
    """``framework``: auto (pt with torch, else numpy), pt or numpy; ``io``: safe_open's backend."""

    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (  # numpy arrays, and the library's pread backend
        MappingProxyType({"framework": "numpy"}), MappingProxyType({"io": "pread"}),
    )

    framework: str = "auto"
    io: str = "mmap"

    def __post_init__(self) -> None:
        check_param(NAME, "framework", self.framework in FRAMEWORKS,
                    f"one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        check_param(NAME, "io", self.io in IOS, f"one of {', '.join(IOS)}, got {self.io!r}")


@contextmanager
def refusals(path: str) -> Iterator[None]:
    """The library's own refusal of a file (truncated, malformed) as a FormatError naming the file."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise FormatError(path, "safetensors", f"the safetensors library refused it: {exc}") from None


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


class SafetensorsPeerStrategy(PeerStrategy):
    name: ClassVar[str] = NAME
    summary: ClassVar[str] = ("reference: safetensors safe_open + get_tensor per tensor (framework=auto: pt "
                              "with torch, onto the GPU the README way; else numpy, BF16 via ml_dtypes); "
                              "io=mmap (the library's default) or pread")
    Params: ClassVar[type] = SafetensorsPeerParams
    library: ClassVar[str] = "safetensors"
    modules: ClassVar[tuple[str, ...]] = ("safetensors",)
    sets: ClassVar[bool] = True  # a sharded checkpoint as its documentation loads several files

    def framework(self) -> str:
        if self.params.framework != "auto":
            return self.params.framework
        return "pt" if torch_installed() else "numpy"

    def needs_torch(self) -> bool:
        return self.framework() == "pt"

    def fits_file(self, index: TensorIndex, backend: str) -> Availability:
        codes = {t.dtype for t in index.tensors}
        framework = self.framework()
        if framework == "pt" and not torch_installed():
            return Availability(False, f"framework=pt needs torch, which is not installed; {INSTALL_TORCH}")
        unreadable = codes & NO_FRAMEWORK_CODES if framework == "pt" else codes - NUMPY_CODES
        if unreadable:
            fix = "" if framework == "pt" else "; framework=pt (torch) reads F8 and F4"
            return Availability(False, f"framework={framework} cannot hold {', '.join(sorted(unreadable))}{fix}")
        if framework == "numpy" and "BF16" in codes and importlib.util.find_spec("ml_dtypes") is None:
            return Availability(False, "numpy has no bfloat16 without ml_dtypes; pip install 'workbench[peers]'")
        if self.params.io != "mmap" and version_tuple("safetensors") < (0, 8):
            return Availability(False, f"io={self.params.io} needs safetensors >= 0.8 (safe_open backend=)")
        return Availability(True)

    def prepare(self, device: Device) -> None:
        # ml_dtypes registers bfloat16 with numpy on import: start-up, not load.
        probe_modules(("torch",) if self.needs_torch() else ("ml_dtypes",), self.hint)
        super().prepare(device)

    def _read(self, ctx: LoadContext) -> None:
        from safetensors import safe_open

        framework, io = self.framework(), self.params.io
        if framework == "numpy" and any(t.dtype == "BF16" for t in ctx.tensors):
            import ml_dtypes  # noqa: F401 - numpy learns the name 'bfloat16' safetensors asks it for
        host = on_host(ctx.device.info().backend)
        target = torch_device(ctx.device) if framework == "pt" else "cpu"
        # Lazy views of the mapping (pt + mmap on CPU) hold no bytes yet; numpy results cannot reach
        # a GPU by themselves: in both cases the workbench's copy puts the bytes on the device.
        copy = (framework == "numpy" and not host) or (framework == "pt" and host and io == "mmap")
        options = {} if io == "mmap" else {"backend": io}  # before 0.8 safe_open has no backend=
        for file, tensors in ctx.by_file():  # a sharded checkpoint: one safe_open per shard, in order
            with ctx.phase("read"), refusals(file.path):
                handle = safe_open(file.path, framework=framework, device=target, **options)
            with handle:
                for info in tensors:
                    with ctx.phase("read"), refusals(file.path):
                        value = handle.get_tensor(info.name)
                    (copy_tensor if copy else adopt_tensor)(ctx, info, value)
        from_mapping = framework == "pt" and io == "mmap"  # numpy results are private heap copies
        ctx.set_path(readers=1, copy_from="mmap" if from_mapping else "pageable", direct=False)
        placed = "copied onto the device by the workbench" if copy else "the library's tensors adopted"
        self.engage(ctx, f"safe_open(framework={framework}, backend={io}) -> {target}; {placed}")
