"""What a load strategy is: a name, typed parameters, an availability check and ``load``.

A strategy subclass sets ``name``, ``summary`` and ``Params`` (a frozen dataclass with defaults,
deriving from :class:`BaseParams`) and implements ``_load(ctx)``. The template :meth:`Strategy.load`
does what every strategy needs identically: the eviction policy, phase times, page-fault deltas,
cleanup of threads, mappings, fds and staging even when ``_load`` raises, a device synchronize inside
the timed window, and the frozen :class:`LoadResult`.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

from workbench.errors import StrategyUnavailable
from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.strategies.context import LoadContext, _distinct_buffers
from workbench.strategies.params import BaseParams, Parameterized, check_param, parse_params
from workbench.strategies.result import (
    PHASES, Engaged, LoadResult, PhaseClock, Placement, page_faults,
)
from workbench.upload.base import Device

__all__ = ["PHASES", "BaseParams", "Engaged", "LoadContext", "LoadResult", "PhaseClock", "Placement",
           "Strategy", "check_param", "free_placements", "page_faults", "parse_params"]


class Strategy(Parameterized):
    """Base of every load strategy. Subclasses: ``name``, ``Params``, ``summary``, ``_load``.

    ``kind`` is ``"strategy"`` for the workbench's own techniques and ``"peer"`` for reference
    strategies that run a stock library's loader (``strategies/peers/``).
    """

    summary: ClassVar[str] = ""
    kind: ClassVar[str] = "strategy"

    @classmethod
    def available(cls) -> Availability:
        return Availability(True)

    @classmethod
    def installed(cls) -> Availability:
        """Availability without importing an optional library (what ``workbench strategies`` lists);
        :meth:`available` by default, which for the workbench's own strategies imports nothing."""
        return cls.available()

    @classmethod
    def supports(cls, index: TensorIndex) -> Availability:
        """Whether this strategy can load the model ``index`` (a peer loader may read one format only)."""
        return Availability(True)

    def fits(self, index: TensorIndex, backend: str) -> Availability:
        """Whether this strategy, with its parameters, can load ``index`` onto a ``backend`` device
        (registry name: host, host-uma, cuda, hip). The runner asks before any run is recorded, and
        :meth:`load` before its clock starts. Default: :meth:`supports`."""
        return self.supports(index)

    def prepare(self, device: Device) -> None:
        """Start-up work the worker does during device init, before the load window opens: importing a
        library, creating its view of the device (a framework's CUDA context). Default: nothing.
        A load must still work without it (it then pays that cost inside its window)."""

    def resolve_evict(self, device: Device) -> tuple[bool, str]:
        """The eviction policy for this load: the param, else WORKBENCH_PAGE_EVICTION, else the device."""
        from workbench.io.policy import resolve_eviction  # lazy: keeps `import workbench` light

        return resolve_eviction(device.info().uma, getattr(self.params, "evict", None))

    def load(self, index: TensorIndex, device: Device) -> LoadResult:
        """Load every tensor of ``index`` onto ``device``, one device buffer per tensor.

        Raises
        ------
        StrategyUnavailable
            When :meth:`available` says no. Anything ``_load`` raises propagates after cleanup; the
            device buffers of a failed load are freed.
        """
        avail = self.available()
        if not avail:
            raise StrategyUnavailable(self.name, avail.reason)
        fits = self.fits(index, device.info().backend)
        if not fits:
            raise StrategyUnavailable(self.name, f"{index.path}: {fits.reason}")
        evict, source = self.resolve_evict(device)
        ctx = LoadContext(index, device, evict, source)
        f0 = page_faults()
        t0 = time.perf_counter()
        self._run(ctx)
        load_s = time.perf_counter() - t0
        f1 = page_faults()
        return self._result(ctx, device, load_s, f1[0] - f0[0], f1[1] - f0[1])

    def _run(self, ctx: LoadContext) -> None:
        try:
            self._load(ctx)
            with ctx.phase("sync"):
                ctx.device.synchronize()
        except BaseException:
            try:  # copies in flight may still read staging that cleanup is about to release
                ctx.device.synchronize()
            except Exception:
                pass
            try:
                ctx.stack.close()
            finally:
                ctx.free_placements()
            raise
        try:
            ctx.stack.close()
        except BaseException:
            ctx.free_placements()
            raise

    def _result(self, ctx: LoadContext, device: Device, load_s: float, minflt: int, majflt: int) -> LoadResult:
        return LoadResult(
            strategy=self.name,
            params=dataclasses.asdict(self.params),
            device=device.info().backend,
            bytes_moved=ctx.bytes_moved,
            n_tensors=len(ctx.placements),
            load_s=load_s,
            phases=dict(ctx.clock.totals),
            minflt=minflt,
            majflt=majflt,
            evict=ctx.evict,
            evict_source=ctx.evict_source,
            engaged=tuple(ctx.engaged),
            notes=tuple(ctx.notes),
            placements=tuple(ctx.placements),
            counters=dict(ctx.counters),
            path=dict(ctx.path),
        )

    def _load(self, ctx: LoadContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def free_placements(device: Device, result: LoadResult) -> None:
    """Free the device buffers a load left in ``result`` (the caller owns them after verification)."""
    for buf in _distinct_buffers(result.placements):
        device.free(buf)
