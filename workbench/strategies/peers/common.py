"""What every peer shares: availability as one line, device and file fit, the pre-window hook (library
import, the framework's CUDA context, the library's environment settings), and handing the library's
tensors to the device as placements — adopted where they already are on it, copied where they are not.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
from contextlib import contextmanager
from typing import Any, ClassVar, Iterable, Iterator, Mapping

import numpy as np

from workbench.errors import FormatError, WorkbenchError
from workbench.formats.drift import changed_since_indexed, check_unchanged
from workbench.formats.index import TensorIndex, TensorInfo
from workbench.registry import Availability
from workbench.strategies.base import LoadContext, Strategy
from workbench.upload.base import Device

INSTALL = "pip install 'workbench[peers]'"
INSTALL_TORCH = "pip install torch first, then 'workbench[peers-torch]'"


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:120]}" if lines else type(exc).__name__


def probe_modules(modules: Iterable[str], hint: str) -> Availability:
    """Import each module; the first that fails is the reason (one line, with the install hint)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a broken native library fails with OSError and kin
            return Availability(False, f"module missing: {name} ({first_line(exc)}); {hint}")
    return Availability(True)


@functools.lru_cache(maxsize=None)
def version_of(distribution: str) -> str:
    """The installed version (read once: later asks inside the load window cost nothing)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def version_tuple(distribution: str) -> tuple[int, ...]:
    parts = []
    for piece in version_of(distribution).split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def on_host(backend: str) -> bool:
    """The host backends stand in for a device with CPU memory: a peer loads to "cpu" there."""
    return backend.startswith("host")


def torch_device(device: Device) -> str:
    """The torch device string of the workbench device (ROCm builds of torch call HIP devices cuda)."""
    if on_host(device.info().backend):
        return "cpu"
    return f"cuda:{getattr(device, 'ordinal', 0)}"


def start_torch_on(device: Device) -> None:
    """Create torch's view of the device before the window: its CUDA context on the ordinal and its
    caching allocator (first allocation), as an engine has done long before it loads weights."""
    import torch

    target = torch_device(device)
    if target != "cpu":
        torch.cuda.set_device(target)
        torch.empty(1, device=target)
        torch.cuda.synchronize(target)


@contextmanager
def environment(settings: Mapping[str, str | None]) -> Iterator[None]:
    """Set the library's environment variables for one load and restore what was there (None: unset)."""
    saved = {key: os.environ.get(key) for key in settings}
    try:
        for key, value in settings.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def timed(ctx: LoadContext, items: Iterable[Any], phase: str = "read") -> Iterator[Any]:
    """Yield from a library's generator, timing each step it takes as ``phase`` (phases never nest)."""
    iterator = iter(items)
    while True:
        with ctx.phase(phase):
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item


def torch_bytes(tensor: Any) -> np.ndarray:
    """A CPU torch tensor's bytes as a flat uint8 array over the same memory (no copy)."""
    import torch

    if not tensor.is_contiguous():
        raise ValueError("a peer returned a non-contiguous tensor; its bytes are not one range")
    return tensor.reshape(-1).view(torch.uint8).numpy()


def adopt_tensor(ctx: LoadContext, info: TensorInfo, tensor: Any) -> None:
    """The library's tensor, where it is (the device, or CPU memory on the host backend), as the
    placement: torch tensors and numpy arrays alike; ``tensor`` keeps the memory allocated."""
    if isinstance(tensor, np.ndarray):
        array = np.ascontiguousarray(tensor)
        ctx.adopt(info, int(array.ctypes.data), int(array.nbytes), array)
        return
    if not tensor.is_contiguous():
        raise ValueError(f"{info.name}: the peer returned a non-contiguous tensor")
    ctx.adopt(info, int(tensor.data_ptr()), int(tensor.nbytes), tensor)


def file_mappings() -> list[tuple[int, int, str]]:
    """(start, end, path) of every file-backed mapping of this process (Linux; empty elsewhere)."""
    ranges = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    lo, hi = fields[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16), fields[5].strip()))
    except OSError:
        pass
    return ranges


def check_not_lazy(ctx: LoadContext) -> None:
    """Refuse a load whose adopted host memory lies in a mapping of the model file: such tensors are
    lazy views, nothing was read in the window, and the numbers would be fiction."""
    path = os.path.realpath(ctx.index.path)
    mapped = [(lo, hi) for lo, hi, name in file_mappings() if name == path]
    for p in ctx.placements:
        buf = p.buffer
        if buf.adopted and buf.nbytes and any(lo <= buf.ptr < hi for lo, hi in mapped):
            raise WorkbenchError(f"{p.tensor}: the peer's tensor is a view of the file mapping, read lazily "
                                 "after the window; copy it onto the device instead of adopting it")


def copy_tensor(ctx: LoadContext, info: TensorInfo, tensor: Any) -> None:
    """Copy a CPU result onto the device ourselves, inside the window (phase ``upload``): for a library
    with no way onto the device, or whose CPU tensors are lazy views of the file mapping."""
    data = tensor if isinstance(tensor, np.ndarray) else torch_bytes(tensor)
    buf = ctx.place(info)
    with ctx.phase("upload"):
        ctx.upload(buf, 0, np.ascontiguousarray(data).reshape(-1).view(np.uint8))


class PeerStrategy(Strategy):
    """Base of the reference strategies. Subclasses name their ``library`` (pip distribution), the
    ``modules`` to import, whether they load to GPUs only, and implement ``_read``."""

    kind: ClassVar[str] = "peer"
    library: ClassVar[str] = ""
    modules: ClassVar[tuple[str, ...]] = ()
    hint: ClassVar[str] = INSTALL
    gpu_only: ClassVar[bool] = False
    sets: ClassVar[bool] = False  # True once the peer loads a model of several files as its library's README does

    @classmethod
    def available(cls) -> Availability:
        avail = probe_modules(cls.modules, cls.hint)
        if not avail:
            return avail
        names = [cls.library] + (["torch"] if "torch" in cls.modules else [])
        versions = ", ".join(f"{name} {version_of(name)}" for name in names)
        return Availability(True, versions + ("; CUDA devices only" if cls.gpu_only else ""))

    @classmethod
    def supports(cls, index: TensorIndex) -> Availability:
        if index.format != "safetensors":
            return Availability(False, f"reads safetensors files only, this one is {index.format}")
        if index.sharded and not cls.sets:
            return Availability(False, f"loads one file here; a model of {len(index.files)} files is not wired yet")
        return Availability(True)

    def fits(self, index: TensorIndex, backend: str) -> Availability:
        fit = self.supports(index)
        if fit and self.gpu_only and on_host(backend):
            return Availability(False, f"{self.library} loads to CUDA devices only; the {backend} backend has none")
        return self.fits_file(index, backend) if fit else fit

    def fits_file(self, index: TensorIndex, backend: str) -> Availability:
        """What this library (with these parameters) cannot read in ``index``: by default, dtype codes
        missing from the library's own table (:meth:`readable_codes`)."""
        readable = self.readable_codes()
        unreadable = {t.dtype for t in index.tensors} - readable if readable is not None else set()
        if unreadable:
            return Availability(False, f"{self.library} {version_of(self.library)} cannot read "
                                       f"{', '.join(sorted(unreadable))} tensors")
        return Availability(True)

    @classmethod
    def readable_codes(cls) -> frozenset[str] | None:
        """The safetensors dtype codes the library maps (from its own table); None: not known."""
        return None

    def needs_torch(self) -> bool:
        return "torch" in self.modules

    def settings(self) -> dict[str, str | None]:
        """Environment variables this configuration sets for the library (None: leave unset)."""
        return {}

    def prepare(self, device: Device) -> None:
        # A fresh process per run, so process-wide settings are fine here, and set before the library
        # is imported (some read them at import, Run:ai's at its first request).
        for key, value in self.settings().items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.available() and self.needs_torch():
            start_torch_on(device)
        self.describe()  # reads the versions the engaged note names, before the window

    def describe(self) -> str:
        """``library version`` (and torch's) for the engaged note."""
        text = f"{self.library} {version_of(self.library)}"
        return text + (f", torch {version_of('torch')}" if self.needs_torch() else "")

    def _load(self, ctx: LoadContext) -> None:
        check_unchanged(ctx.index)  # the library opens the file itself: check what it is about to read
        ctx.enter(environment(self.settings()))
        try:
            self._read(ctx)
        except WorkbenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - the library's own error type, whatever it is
            changed = changed_since_indexed(ctx.index)
            if not changed:
                raise  # a library failure on an intact file keeps its traceback
            raise FormatError(ctx.index.path, "file", f"changed since it was indexed ({changed}); "
                                                      f"{self.library} failed: {first_line(exc)}") from None
        if on_host(ctx.device.info().backend):
            check_not_lazy(ctx)
        if ctx.evict:
            ctx.note("eviction policy is on but a peer reads its own way: no DONTNEED applied")

    def _read(self, ctx: LoadContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def engage(self, ctx: LoadContext, how: str) -> None:
        n = len(ctx.tensors)
        ctx.engage("peer", len(ctx.placements), n, note=f"{self.describe()}: {how}")
