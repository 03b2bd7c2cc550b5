"""``peer-instanttensor``: InstantTensor's ``safe_open``, the way its README loads a file::

    with safe_open(path, framework="pt", device=0) as f:   # reading starts in the constructor
        for name, tensor in f.tensors():                    # copy=True: each tensor owns its CUDA memory
            ...

A sharded checkpoint is one ``safe_open`` over the list of its files: the library's documentation
says a list of paths "has better performance than calling safe_open multiple times" (it sorts them
and pipelines reads across files).

CUDA devices only (it refuses any other device before reading), so on the host backend the strategy is
unavailable. It also refuses files whose tensors are not back to back, and a file without tensors.

``direct``: None keeps the library's choice (io_uring then AIO, both O_DIRECT, on disk files; mmap on
tmpfs); 0 is its ``BackendPolicy.BUFFERED`` (buffered io_uring, then mmap); 1 asks for the two O_DIRECT
backends explicitly. The backend it picked and its I/O depth are read back from the open handle.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.strategies.base import BaseParams, LoadContext
from workbench.strategies.peers.common import INSTALL_TORCH, PeerStrategy, adopt_tensor, model_paths, timed

NAME = "peer-instanttensor"
BUFFERED_BACKENDS = ("URING_BUFFERED", "AIO_BUFFERED", "MMAP")


@dataclass(frozen=True)
class InstantTensorPeerParams(BaseParams):
    """``direct``: None = the library's backend list (O_DIRECT on disk files)."""

    # buffered reads instead of O_DIRECT
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (MappingProxyType({"direct": False}),)

    direct: bool | None = None


def backend_arg(direct: bool | None) -> Any:
    from instanttensor import Backend, BackendPolicy

    if direct is None:
        return None
    return [Backend.URING, Backend.AIO] if direct else BackendPolicy.BUFFERED


UNPACKED_CODES = frozenset({"F4"})


class InstantTensorPeerStrategy(PeerStrategy):
    name: ClassVar[str] = NAME
    summary: ClassVar[str] = ("reference: InstantTensor safe_open(framework='pt', device=N).tensors(), CUDA "
                              "only; direct=None is the library's default (io_uring/AIO O_DIRECT on disk), "
                              "direct=0 its BUFFERED policy")
    Params: ClassVar[type] = InstantTensorPeerParams
    library: ClassVar[str] = "instanttensor"
    modules: ClassVar[tuple[str, ...]] = ("torch", "instanttensor")
    hint: ClassVar[str] = INSTALL_TORCH
    sets: ClassVar[bool] = True  # a sharded checkpoint as its documentation loads several files
    gpu_only: ClassVar[bool] = True

    @classmethod
    def readable_codes(cls) -> frozenset[str] | None:
        try:
            from instanttensor._impl import safetensors_to_torch_dtype
        except ImportError:
            return None
        # Its table maps F4, but it lands a 4-bit tensor one byte per value (12 B on the device for a
        # 6-byte tensor, seen on the H200 on 2026-12-01): not the file's bytes, so not readable here.
        return frozenset(safetensors_to_torch_dtype) - UNPACKED_CODES

    def fits_file(self, index: TensorIndex, backend: str) -> Availability:
        fit = super().fits_file(index, backend)
        if not fit:
            return fit
        for file, tensors in index.by_file():  # the library checks each file of a set on its own
            if not tensors:
                return Availability(False, f"instanttensor cannot open a file without tensors ({file.name})")
            gaps = [a.name for a, b in zip(tensors, tensors[1:]) if a.offset + a.nbytes != b.offset]
            if gaps:
                return Availability(False, f"instanttensor needs back-to-back tensors; a gap follows {gaps[0]}"
                                           + (f" in {file.name}" if index.sharded else ""))
        return Availability(True)

    def settings(self) -> dict[str, str | None]:
        return {"INSTANTTENSOR_BACKEND": None}  # the parameter decides, not a stray environment

    def _read(self, ctx: LoadContext) -> None:
        from instanttensor import safe_open

        ordinal, by_name = getattr(ctx.device, "ordinal", 0), {t.name: t for t in ctx.tensors}
        paths = model_paths(ctx)
        with ctx.phase("read"):
            handle = ctx.enter(safe_open(paths[0] if len(paths) == 1 else paths, framework="pt",
                                         device=ordinal, backend=backend_arg(self.params.direct)))
        for name, tensor in timed(ctx, handle.tensors()):
            adopt_tensor(ctx, by_name[name], tensor)
        chosen = getattr(getattr(handle, "backend", None), "name", None)
        depth = getattr(handle, "io_depth", None)
        ctx.set_path(readers=int(depth or 1), copy_from="pinned",
                     direct=chosen is not None and chosen not in BUFFERED_BACKENDS)
        asked = {None: "library default", True: "URING,AIO", False: "BUFFERED"}[self.params.direct]
        self.engage(ctx, f"safe_open -> cuda:{ordinal}, backend {chosen or 'not reported'} (asked: {asked}), "
                         f"io depth {depth}; tensors adopted")
