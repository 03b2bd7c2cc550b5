"""Reference strategies: how a stock library loads the same file, measured by the same runner.

A peer is a baseline to beat, not a technique to tune: it runs the library's own read path and only
the upload is ours (the same ``copy_h2d`` every strategy uses), so the difference is the read path.
Present when the library is installed (``pip install 'workbench[peers]'``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, Iterator

import numpy as np

from workbench.errors import FormatError
from workbench.formats.drift import check_unchanged
from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.strategies.base import BaseParams, LoadContext, Strategy


@dataclass(frozen=True)
class SafetensorsPeerParams(BaseParams):
    """No knobs of its own: the library decides how it reads. ``evict`` is recorded, not applied."""


class SafetensorsPeerStrategy(Strategy):
    name: ClassVar[str] = "peer-safetensors"
    kind: ClassVar[str] = "peer"  # a reference to beat, not a technique: benchmarks pick peers up by it
    summary: ClassVar[str] = "reference: the safetensors package's safe_open(framework='numpy') reads each tensor, then upload"
    Params: ClassVar[type] = SafetensorsPeerParams

    @classmethod
    def available(cls) -> Availability:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            return Availability(False, "module missing: safetensors")
        return Availability(True)

    @classmethod
    def supports(cls, index: TensorIndex) -> Availability:
        if index.format != "safetensors":
            return Availability(False, f"reads safetensors files only, this one is {index.format}")
        return Availability(True)

    def _load(self, ctx: LoadContext) -> None:
        import safetensors
        from safetensors import safe_open

        check_unchanged(ctx.index)
        with ctx.phase("read"), _refusals(ctx.index.path):
            handle = ctx.enter(safe_open(ctx.index.path, framework="numpy"))
        for t in ctx.tensors:
            buf = ctx.place(t)
            with ctx.phase("read"), _refusals(ctx.index.path):
                array = handle.get_tensor(t.name)  # the library's own read: a numpy copy of the bytes
            with ctx.phase("upload"):
                ctx.upload(buf, 0, np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        n = len(ctx.tensors)
        ctx.engage("peer", n, n, note=f"safetensors {safetensors.__version__} safe_open, numpy")
        if ctx.evict:
            ctx.note("eviction policy is on but a peer reads its own way: no DONTNEED applied")


@contextmanager
def _refusals(path: str) -> Iterator[None]:
    """The library's own error (a file it cannot read, e.g. truncated) as a FormatError naming the file."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as exc:
        raise FormatError(path, "safetensors", f"the safetensors library refused it: {exc}") from None
