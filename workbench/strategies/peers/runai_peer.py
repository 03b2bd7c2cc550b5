"""``peer-runai``: Run:ai Model Streamer, the way its README loads a model onto a GPU::

    with SafetensorsStreamer() as streamer:
        streamer.stream_files(paths)                 # C++ readers fill a CPU ring of buffers
        for name, tensor in streamer.get_tensors():
            gpu_tensor = tensor.to("cuda:0")         # torch's copy from that pageable ring

``paths`` is the model's files: one, or every shard of a sharded checkpoint in one request (the
README's multi-file form; ``stream_file(path)`` is ``stream_files([path])``).
The GPU copy is the README's ``.to()``, timed as ``upload`` and adopted; on the host backend the yielded
CPU tensors (owned by the caller, the default) are adopted as they are — ``.to("cpu")`` is no copy.

Its knobs are environment variables, several fixed at the process's first request, which is why they
are set in ``prepare`` (every run is a fresh process): ``direct`` picks ``RUNAI_STREAMER_FS_STRATEGY``
(None: the library's ``io_uring_direct,libaio_direct,sync_buffered``; 1: the two direct ones only; 0:
``io_uring_buffered,sync_buffered``), ``concurrency`` sets ``RUNAI_STREAMER_CONCURRENCY`` (None: its 16
on a file system). The library's log goes to a file for the load, and the strategy it actually used
(its "Filesystem strategy:" line) is what the engaged note and the O_DIRECT fact report.
"""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.output.owned import make_owned
from workbench.strategies.base import BaseParams, LoadContext, check_param
from workbench.strategies.peers.common import (
    INSTALL_TORCH, PeerStrategy, adopt_tensor, model_paths, timed, torch_device,
)

NAME = "peer-runai"
FS_STRATEGIES = {None: None, True: "io_uring_direct,libaio_direct", False: "io_uring_buffered,sync_buffered"}
LIBRARY_CONCURRENCY = 16  # RUNAI_STREAMER_CONCURRENCY's default for a file system
_STRATEGY_LINE = re.compile(r"Filesystem strategy: (\S+)")


@dataclass(frozen=True)
class RunaiPeerParams(BaseParams):
    """``direct``: None = the library's list (O_DIRECT first); ``concurrency``: None = its 16."""

    # buffered reads instead of O_DIRECT
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (MappingProxyType({"direct": False}),)

    direct: bool | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        ok = self.concurrency is None or self.concurrency >= 1
        check_param(NAME, "concurrency", ok, f"must be >= 1 or none, got {self.concurrency}")


def strategy_used(log_path: str) -> str | None:
    """The file-system strategy the library's log says it resolved (the last one), if it said."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            found = _STRATEGY_LINE.findall(fh.read())
    except OSError:
        return None
    return found[-1] if found else None


def _discard(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class RunaiPeerStrategy(PeerStrategy):
    name: ClassVar[str] = NAME
    summary: ClassVar[str] = ("reference: Run:ai Model Streamer SafetensorsStreamer to its CPU ring, then "
                              "tensor.to(device); direct=None is the library's default (io_uring O_DIRECT "
                              "first), direct=0 buffered")
    Params: ClassVar[type] = RunaiPeerParams
    library: ClassVar[str] = "runai-model-streamer"
    modules: ClassVar[tuple[str, ...]] = ("torch", "runai_model_streamer")
    hint: ClassVar[str] = INSTALL_TORCH
    sets: ClassVar[bool] = True  # a sharded checkpoint as its documentation loads several files

    @classmethod
    def readable_codes(cls) -> frozenset[str] | None:
        try:
            from runai_model_streamer.safetensors_streamer.safetensors_pytorch import safetensors_to_torch_dtype
        except ImportError:
            return None
        return frozenset(safetensors_to_torch_dtype)

    def log_path(self) -> str:
        """Where the library logs for this strategy instance (chosen once: the C++ side may keep it)."""
        if not getattr(self, "_log_path", None):
            # owner-named: the log of a run killed before its cleanup is reaped by the next one
            fd, self._log_path = make_owned(tempfile.gettempdir(), "workbench-runai-", ".log")
            os.close(fd)
        return self._log_path

    def settings(self) -> dict[str, str | None]:
        p = self.params
        return {"RUNAI_STREAMER_FS_STRATEGY": FS_STRATEGIES[p.direct],
                "RUNAI_STREAMER_CONCURRENCY": None if p.concurrency is None else str(p.concurrency),
                "RUNAI_STREAMER_LOG_FILE": self.log_path(), "RUNAI_STREAMER_LOG_LEVEL": "INFO"}

    def _read(self, ctx: LoadContext) -> None:
        from runai_model_streamer import SafetensorsStreamer

        target, by_name = torch_device(ctx.device), {t.name: t for t in ctx.tensors}
        ctx.cleanup(_discard, self.log_path())
        with ctx.phase("read"):
            streamer = ctx.enter(SafetensorsStreamer())
            streamer.stream_files(model_paths(ctx))  # every shard in one request, as its README does
        for name, tensor in timed(ctx, streamer.get_tensors()):
            if target != "cpu":
                with ctx.phase("upload"):
                    tensor = tensor.to(target)  # the README's step, as shipped: pageable H2D by torch
            adopt_tensor(ctx, by_name[name], tensor)
        used = strategy_used(self.log_path())
        concurrency = self.params.concurrency or LIBRARY_CONCURRENCY
        ctx.set_path(readers=concurrency, copy_from="pageable", direct=bool(used and "direct" in used))
        asked = FS_STRATEGIES[self.params.direct] or "library default"
        self.engage(ctx, f"SafetensorsStreamer -> {target}, fs strategy {used or 'not reported'} "
                         f"(asked: {asked}), concurrency {concurrency}; tensors adopted")
