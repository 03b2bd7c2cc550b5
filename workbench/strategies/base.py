"""What a load strategy is: a name, typed parameters, an availability check and ``load``.

A strategy subclass sets ``name``, ``summary`` and ``Params`` (a frozen dataclass with defaults,
deriving from :class:`BaseParams`) and implements ``_load(ctx)``. The template :meth:`Strategy.load`
does what every strategy needs identically: the eviction policy, phase times, page-fault deltas,
cleanup of threads, mappings, fds and staging even when ``_load`` raises, a device synchronize inside
the timed window, and the frozen :class:`LoadResult`.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from contextlib import ExitStack
from typing import Any, Callable, ClassVar, Mapping, Sequence

from workbench.errors import StrategyUnavailable
from workbench.formats.index import ModelFile, TensorIndex, TensorInfo
from workbench.io.descriptors import check_descriptors, open_checked
from workbench.registry import Availability
from workbench.strategies.params import BaseParams, check_param, parse_params
from workbench.strategies.result import (
    PHASES, Engaged, LoadResult, PhaseClock, Placement, page_faults,
)
from workbench.upload.base import Device, DeviceBuffer

__all__ = ["PHASES", "BaseParams", "Engaged", "LoadContext", "LoadResult", "PhaseClock", "Placement",
           "Strategy", "check_param", "free_placements", "page_faults", "parse_params"]


class LoadContext:
    """What ``_load`` works with: the index, the device, the eviction policy, the clock, and helpers
    that allocate one device buffer per tensor, upload and count bytes, record engaged facts and notes,
    and register cleanups that run whether the load succeeds or raises."""

    def __init__(self, index: TensorIndex, device: Device, evict: bool, evict_source: str):
        self.index, self.device = index, device
        self.evict, self.evict_source = evict, evict_source
        self.clock = PhaseClock()
        self.tensors: tuple[TensorInfo, ...] = index.sorted_by_offset()  # file order: readahead-friendly
        self.stack = ExitStack()
        self.placements: list[Placement] = []
        self.engaged: list[Engaged] = []
        self.notes: list[str] = []
        self.counters: dict[str, int] = {}
        self.bytes_moved = 0
        self._lock = threading.RLock()  # once() makes objects that open descriptors under it
        self._fds: dict[tuple[str, int], int] = {}
        self._once: dict[Any, Any] = {}
        # What the load actually did, for choosing the wall it is up against: how many threads read
        # the file at once, what memory the device copied from, and whether reads bypassed the cache.
        self.path: dict[str, Any] = {"readers": 1, "copy_from": "pageable", "direct": False}

    def set_path(self, *, readers: int | None = None, copy_from: str | None = None,
                 direct: bool | None = None) -> None:
        """Record the read/copy path that actually ran (strategies call this when they pick one)."""
        for key, value in (("readers", readers), ("copy_from", copy_from), ("direct", direct)):
            if value is not None:
                self.path[key] = value

    def phase(self, name: str) -> Any:
        """Time a block as phase ``name`` (loading thread only)."""
        return self.clock(name)

    @property
    def files(self) -> tuple[ModelFile, ...]:
        """The model's files, in order (one for a single-file model)."""
        return self.index.files

    def by_file(self) -> list[tuple[ModelFile, tuple[TensorInfo, ...]]]:
        """Each file with its tensors in file order."""
        return self.index.by_file()

    def fd(self, file: str | ModelFile | TensorInfo | None = None, flags: int = os.O_RDONLY) -> int:
        """A descriptor of one of the model's files (``None``: the only one), opened once per load and
        flags, refused if changed since indexing or not a regular file, closed at the load's end; thread-safe."""
        path = self.path_of(file)
        with self._lock:
            fd = self._fds.get((path, flags))
            if fd is None:
                if not self._fds:  # the load's first: room for one per file, or one line saying why not
                    check_descriptors(self.index.path, len(self.files))
                fd = self._fds[(path, flags)] = open_checked(self.index, path, flags)
                self.stack.callback(os.close, fd)
        return fd

    def path_of(self, file: str | ModelFile | TensorInfo | None) -> str:
        """The path of one of the model's files (``None``: the only one; a set has to name it)."""
        if file is None:
            if self.index.sharded:
                raise ValueError(f"{self.index.path}: a model of {len(self.files)} files: name the file")
            return self.files[0].path
        return file if isinstance(file, str) else file.file if isinstance(file, TensorInfo) else file.path

    def once(self, key: Any, make: Callable[[], Any]) -> Any:
        """The load's one object for ``key``, made by ``make()`` the first time (a file's mapping)."""
        with self._lock:
            if key not in self._once:
                self._once[key] = make()
            return self._once[key]

    def cleanup(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` when the load ends (last registered runs first)."""
        self.stack.callback(fn, *args)

    def enter(self, cm: Any) -> Any:
        """Enter a context manager whose exit runs when the load ends."""
        return self.stack.enter_context(cm)

    def place(self, tensor: TensorInfo) -> DeviceBuffer:
        """Allocate the tensor's own device buffer and record where it lands."""
        buf = self.device.alloc(tensor.nbytes)
        self.placements.append(Placement(tensor.name, buf, 0, tensor.nbytes))
        return buf

    def place_all(self, tensors: tuple[TensorInfo, ...] | None = None) -> list[DeviceBuffer]:
        """Every tensor's buffer carved from one device allocation (one driver call, not one per
        tensor: 7.6 ms against 0.7 ms for 129 tensors on the H200); each buffer is still bounds-checked
        and freed on its own, the allocation returning when the last is freed."""
        tensors = self.tensors if tensors is None else tensors
        bufs = self.device.alloc_many([t.nbytes for t in tensors])
        self.placements += [Placement(t.name, b, 0, t.nbytes) for t, b in zip(tensors, bufs)]
        return bufs
    def adopt(self, tensor: TensorInfo, ptr: int, nbytes: int, owner: Any) -> DeviceBuffer:
        """Take memory a loader filled on the device (``owner`` keeps it allocated) as the tensor's
        placement, without copying it; its bytes count as moved (the loader moved them in the window)."""
        buf = self.device.adopt(ptr, nbytes, owner)
        self.placements.append(Placement(tensor.name, buf, 0, nbytes))
        self.count("bytes", nbytes)
        return buf

    def place_group(self, members: Sequence[tuple[TensorInfo, int]], nbytes: int) -> DeviceBuffer:
        """Allocate one device buffer of ``nbytes`` holding several tensors, each at its offset (a
        packed expert blob), and record one placement per tensor: each stays verifiable on its own."""
        for t, offset in members:
            if offset < 0 or offset + t.nbytes > nbytes:
                raise ValueError(f"{t.name}: {t.nbytes} B at {offset} do not fit a {nbytes} B group buffer")
        buf = self.device.alloc(nbytes)
        self.placements.extend(Placement(t.name, buf, offset, t.nbytes) for t, offset in members)
        return buf

    def place_groups(self, groups: Sequence[tuple[Sequence[tuple[TensorInfo, int]], int]]) -> list[DeviceBuffer]:
        """Several group buffers (each as :meth:`place_group`: members at their offsets) carved from one
        device allocation, as :meth:`place_all` carves tensors: one driver call for every blob."""
        for members, nbytes in groups:
            for t, offset in members:
                if offset < 0 or offset + t.nbytes > nbytes:
                    raise ValueError(f"{t.name}: {t.nbytes} B at {offset} do not fit a {nbytes} B group buffer")
        bufs = self.device.alloc_many([nbytes for _, nbytes in groups])
        for (members, _), buf in zip(groups, bufs):
            self.placements.extend(Placement(t.name, buf, offset, t.nbytes) for t, offset in members)
        return bufs

    def upload(self, buf: DeviceBuffer, offset: int, src: Any, nbytes: int | None = None) -> None:
        """copy_h2d ``src`` into ``buf`` at ``offset`` and count its bytes (thread-safe; untimed)."""
        self.device.copy_h2d(buf, offset, src)
        self.count("bytes", memoryview(src).nbytes if nbytes is None else nbytes)

    def count(self, counter: str, n: int = 1) -> None:
        """Add ``n`` to a counter (``bytes`` is the bytes moved to the device); thread-safe."""
        with self._lock:
            if counter == "bytes":
                self.bytes_moved += n
            else:
                self.counters[counter] = self.counters.get(counter, 0) + n

    def engage(self, feature: str, done: int, total: int, unit: str = "tensors", note: str = "") -> Engaged:
        fact = Engaged(feature, done, total, unit, note)
        self.engaged.append(fact)
        return fact

    def note(self, text: str) -> None:
        self.notes.append(text)

    def free_placements(self) -> None:
        for buf in _distinct_buffers(self.placements):
            self.device.free(buf)
        self.placements.clear()


class Strategy:
    """Base of every load strategy. Subclasses: ``name``, ``Params``, ``summary``, ``_load``.

    ``kind`` is ``"strategy"`` for the workbench's own techniques and ``"peer"`` for reference
    strategies that run a stock library's loader (``strategies/peers/``).
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type] = BaseParams
    kind: ClassVar[str] = "strategy"

    def __init__(self, params: Any = None, **overrides: Any):
        base = params if params is not None else self.Params()
        self.params = dataclasses.replace(base, **overrides) if overrides else base

    @classmethod
    def from_strings(cls, raw: Mapping[str, Any]) -> "Strategy":
        return cls(parse_params(cls.name, cls.Params, raw))

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

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls.Params)}

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


def _distinct_buffers(placements: Sequence[Placement]) -> list[DeviceBuffer]:
    """Each buffer once: a group buffer (:meth:`LoadContext.place_group`) backs several placements."""
    return list({id(p.buffer): p.buffer for p in placements}.values())
