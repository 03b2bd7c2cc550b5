"""``peer-fastsafetensors``: fastsafetensors' ``SafeTensorsFileLoader`` without GPUDirect Storage, the
way its documentation loads a file onto a device::

    loader = SafeTensorsFileLoader(SingleGroup(), "cuda:0", nogds=True)
    loader.add_filenames({0: [path]})
    files = loader.copy_files_to_device()   # every byte read here, into one device buffer per file
    tensor = files.get_tensor(name)         # a zero-copy view of that buffer

A sharded checkpoint goes in whole, as its documentation registers several files: ``add_filenames``
takes a dict rank → files, and this one process (rank 0 of a ``SingleGroup``) is given every shard;
one ``copy_files_to_device`` then reads them all.

Reader threads ``pread`` into pinned bounce buffers and copy them to the device on their own streams.
The tensors keep the file's buffer alive past ``close`` (owning mode, the default), so they are adopted
as the placements. On the host backend the loader reads to ``"cpu"``: one host buffer, adopted alike.

``direct``: None keeps the library's policy (0.5: O_DIRECT on local and unknown file systems, buffered
on network and RAM file systems); 1 or 0 sets ``FASTSAFETENSORS_ODIRECT`` for the load. With O_DIRECT
a "warm" load never reads the page cache, so a reference row needs both.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.strategies.base import BaseParams, LoadContext, check_param
from workbench.strategies.peers.common import (
    INSTALL_TORCH, PeerStrategy, adopt_tensor, model_paths, on_host, torch_device,
)
from workbench.upload.base import Device

NAME = "peer-fastsafetensors"


@dataclass(frozen=True)
class FastsafetensorsPeerParams(BaseParams):
    """``direct``: None = the library's policy (O_DIRECT on a local file system); the rest are its
    constructor's own defaults."""

    # buffered reads instead of O_DIRECT
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (MappingProxyType({"direct": False}),)

    direct: bool | None = None
    max_threads: int = 16
    bbuf_size_kb: int = 16 * 1024

    def __post_init__(self) -> None:
        check_param(NAME, "max_threads", self.max_threads >= 1, f"must be >= 1, got {self.max_threads}")
        check_param(NAME, "bbuf_size_kb", self.bbuf_size_kb >= 1, f"must be >= 1, got {self.bbuf_size_kb}")


def odirect_policy(path: str) -> bool | None:
    """Whether fastsafetensors' nogds copier opens ``path`` with O_DIRECT under the current environment
    (its own policy function; None if this version has none). A file system that refuses O_DIRECT at
    open still falls back to buffered reads inside the library."""
    try:
        from fastsafetensors.common import is_odirect_enabled
    except ImportError:
        return None
    return bool(is_odirect_enabled(path, buffered_ram_fs=True))


class FastsafetensorsPeerStrategy(PeerStrategy):
    name: ClassVar[str] = NAME
    summary: ClassVar[str] = ("reference: fastsafetensors SafeTensorsFileLoader(nogds=True), "
                              "copy_files_to_device; direct=None is the library's default (O_DIRECT on a "
                              "local file system), direct=0 reads through the page cache")
    Params: ClassVar[type] = FastsafetensorsPeerParams
    library: ClassVar[str] = "fastsafetensors"
    modules: ClassVar[tuple[str, ...]] = ("torch", "fastsafetensors")  # it imports without torch, loads only with it
    hint: ClassVar[str] = INSTALL_TORCH
    sets: ClassVar[bool] = True  # a sharded checkpoint as its documentation loads several files

    @classmethod
    def readable_codes(cls) -> frozenset[str] | None:
        try:
            from fastsafetensors.st_types import DType
        except ImportError:
            return None
        return frozenset(d.value for d in DType) - {"AUTO"}

    def prepare(self, device: Device) -> None:
        super().prepare(device)
        # The loader imports its torch glue on first use: start-up for an engine, not load.
        with contextlib.suppress(ImportError, AttributeError):
            from fastsafetensors.frameworks import get_framework_op

            get_framework_op("pytorch")

    def settings(self) -> dict[str, str | None]:
        direct = self.params.direct
        return {"FASTSAFETENSORS_ODIRECT": None if direct is None else "1" if direct else "0"}

    def _read(self, ctx: LoadContext) -> None:
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup

        p, target = self.params, torch_device(ctx.device)
        with ctx.phase("read"):
            loader = SafeTensorsFileLoader(SingleGroup(), target, nogds=True, max_threads=p.max_threads,
                                           bbuf_size_kb=p.bbuf_size_kb)
            ctx.cleanup(loader.close)
            loader.add_filenames({0: model_paths(ctx)})  # rank 0 (this process) reads every shard
            files = loader.copy_files_to_device()
            ctx.cleanup(files.close)  # the tensors keep the buffer: owning mode
        for info in ctx.tensors:
            with ctx.phase("read"):
                tensor = files.get_tensor(info.name)
            adopt_tensor(ctx, info, tensor)
        direct = odirect_policy(ctx.files[0].path)  # one directory: one file system for every shard
        copy_from = "pageable" if on_host(ctx.device.info().backend) else "pinned"  # its bounce buffers
        ctx.set_path(readers=p.max_threads, copy_from=copy_from, direct=bool(direct))
        io = {None: "I/O mode not reported", True: "O_DIRECT", False: "buffered"}[direct]
        source = "library default" if p.direct is None else f"FASTSAFETENSORS_ODIRECT={int(p.direct)}"
        self.engage(ctx, f"nogds -> {target}, {p.max_threads} threads, {io} ({source}); tensors adopted")
