"""An expert-slice cache under a byte budget, with page accounting that can see the boundary leak.

Entries are (blob, expert) slices staged into their slot of the blob's :class:`Reservation` (slots
per placement: :mod:`workbench.expert.layout`). Staging commits the pages the entry touches;
eviction releases pages (``madvise`` with the ``release_advice``: :class:`Reservation`; ``recycle`` gives
them to the miss that evicted them first: :mod:`workbench.expert.recycle`) by one of two rules:

* ``boundary_release="off"`` — only the pages the entry *fully* covers: exact while slots own whole
  pages, but under the in-place placement every slice shares its first and last page with a
  neighbour, and those pages are never handed back, even once the neighbour is gone too. This is
  the leak of the second write-up, reproduced on purpose; :attr:`CacheFacts.leak_bound_pages` is
  the most it can leak (every page some slot only partly covers).
* ``"on"`` — :func:`~workbench.expert.placement.releasable_pages`: also a boundary page, once no live entry touches it.

The pages are kept by a :class:`~workbench.expert.pagebook.PageBook` (or, under ``placement="pool"``, by the
frames of a :class:`~workbench.expert.pool.FramePool`, where nothing is ever released). The book keeps a
per-page count of live entries touching each page and whether it committed the page, so the cache can
say what it believes it holds (``accounted_pages``: pages some live entry touches) and what it failed to
give back (``unreleased_pages``: committed, touched by nobody, whatever the advice); mincore measures
what is resident, smaps' ``LazyFree`` what of that the kernel may take back at will.

A model may be a set of files: every blob names its file (:attr:`ExpertBlob.file`) and the cache
opens one reader per file. Misses can be read by other threads (a session's reader lanes): the
decode thread :meth:`admit`\\ s a miss (evicting, accounting, pinning it), a lane :meth:`fill`\\ s its
slot with its own reader, and the decode thread :meth:`complete`\\ s and :meth:`unpin`\\ s it. Pinned
entries are never evicted. Everything but :meth:`fill` belongs to the decode thread.
"""
from __future__ import annotations

import os
from typing import Hashable, NamedTuple, Sequence

from workbench.errors import ParamError
from workbench.expert.cache_options import (BOUNDARY_RELEASE, DEFAULT_READER, GATE_SCOPES, _check_args, check_pool,
                                            files_resident, gated_reader)
from workbench.expert.cache_state import CacheCounters, CacheFacts, CacheMemory, MutableCounters
from workbench.expert.layout import layout_blobs
from workbench.expert.memory import PAGE, Reservation
from workbench.expert.pagebook import PageBook
from workbench.expert.policy import EvictionPolicy, make_policy
from workbench.expert.pool import FramePool, open_pool
from workbench.expert.readers import ReadOutcome, SliceReader, make_reader, resolve_reader
from workbench.formats.index import ExpertBlob

__all__ = ["BOUNDARY_RELEASE", "DEFAULT_READER", "GATE_SCOPES", "CacheCounters", "CacheFacts", "CacheMemory",
           "ExpertCache", "SliceKey"]


class SliceKey(NamedTuple):
    """One cache entry: expert ``expert`` of blob number ``blob`` (an index into the cache's blobs)."""

    blob: int
    expert: int


class ExpertCache:
    """Expert slices of ``blobs`` under ``budget_bytes`` of payload.

    Parameters
    ----------
    path, blobs
        The model (its canonical path) and the expert blobs to cache (``index.path, index.blobs``); a
        blob is read from its own ``file``, from ``path`` when it names none.
    budget_bytes
        Payload bytes the live entries may hold; at least the largest slice.
    placement
        ``"inplace"``, ``"bounce"`` or ``"aligned"`` (see :mod:`workbench.expert.layout`), or ``"pool"``: frames
        of one resident pool any expert takes, never handed back, for the session to page-lock
        (:mod:`workbench.expert.pool`; :attr:`pool`).
    boundary_release, release_advice
        ``"on"`` (release a boundary page once no live entry touches it) or ``"off"`` (the leak);
        ``"dontneed"``, ``"free"`` (``MADV_FREE``: lazily) or ``"recycle"`` (an admission's evicted pages
        moved into its own slot, the rest ``MADV_DONTNEED``) — how pages are handed back.
    reader
        ``"pread"``, ``"direct-bounce"``, ``"direct-inplace"`` or ``"auto"`` (by placement:
        :data:`DEFAULT_READER`); O_DIRECT falls back to pread per file where refused, noted in :attr:`facts`.
    policy
        ``"lru"``, ``"fifo"`` or an :class:`~workbench.expert.policy.EvictionPolicy` (per layer: :mod:`~.policies`).
    gate, gate_scope
        With ``gate`` (a resident fraction), a miss whose pages the page cache holds at least that
        fraction of is read buffered (the page cache serves it; O_DIRECT would go to the disk again).
        ``gate_scope`` ``"blob"`` measures the miss's blob when it is read; ``"file"`` measures the
        whole model once, when the cache opens (the first write-up's once-per-process gate).
    """

    def __init__(self, path: str | os.PathLike, blobs: Sequence[ExpertBlob], *, budget_bytes: int, reader: str = "auto",
                 placement: str = "inplace", boundary_release: str = "on", release_advice: str = "dontneed",
                 policy: str | EvictionPolicy = "lru", gate: float | None = None, gate_scope: str = "blob"):
        _check_args(blobs, budget_bytes, placement, boundary_release, reader, gate, gate_scope)
        check_pool(placement, reader, boundary_release, "cache", release_advice)
        self.path, self.blobs, self.budget = os.fspath(path), tuple(blobs), budget_bytes
        self.files = tuple(dict.fromkeys(b.file or self.path for b in self.blobs))
        self._policy = make_policy(policy)
        self.pool: FramePool | None = None  # the store under placement="pool", for the session to page-lock
        if placement == "pool":  # the layouts only say where each slice lies in its file
            self.pool, self.layouts, report = open_pool(self.blobs, budget_bytes, self._policy)
        else:
            self.layouts, report = layout_blobs(self.blobs, placement, PAGE)
        self._store: PageBook | FramePool = self.pool or PageBook(self.layouts, release_advice, boundary_release)
        asked = DEFAULT_READER[placement] if reader == "auto" else reader
        resolved = {f: resolve_reader(asked, f) for f in self.files}
        self.reader_kinds = {f: kind for f, (kind, _) in resolved.items()}
        note = "; ".join(dict.fromkeys(n for _, n in resolved.values() if n))
        self._readers: dict[tuple[str, str], SliceReader] = {}
        self._live: dict[SliceKey, int] = {}  # key → payload bytes
        self._pins: dict[SliceKey, int] = {}
        self._live_bytes = 0
        self._c = MutableCounters()
        self.gate, self.gate_scope = gate, gate_scope
        self.file_gate_resident = (files_resident(self.files) >= gate
                                   if gate is not None and gate_scope == "file" else None)
        self.facts = CacheFacts(placement, report, self.reader_kinds[self.files[0]], note, boundary_release,
                                getattr(self._policy, "name", type(self._policy).__name__), budget_bytes,
                                self._store.nbytes, self._store.leak_bound, len(self.files), release_advice)

    # --- the decode thread: lookups, admissions, completions --------------------------------------
    def lookup(self, key: SliceKey, pin: bool = False) -> bool:
        """A hit (counted, the policy told, pinned with ``pin``) or False: then :meth:`admit` it."""
        nbytes = self._live.get(key)
        if nbytes is None:
            return False
        self._c.hits += 1
        self._c.hit_bytes += nbytes
        self._policy.touch(key)
        if pin:
            self._pins[key] = self._pins.get(key, 0) + 1
        return True

    def admit(self, key: SliceKey) -> str:
        """Make a miss live and pinned, evicting unpinned entries as the budget needs; its pages are
        accounted now, its bytes arrive with :meth:`fill`. Returns the reader kind it must be read with."""
        offset, nbytes = self.layouts[key.blob].slice(key.expert)
        room = getattr(self._policy, "make_room", None)  # per-layer caches evict by count (expert.policies)
        store = self._store
        store.begin()  # recycle: evict() leaves what it frees there, for this miss
        ok = False
        try:
            for victim in room(key, self._pins) if room else ():
                self.evict(victim)
            while self._live and ((room is None and self._live_bytes + nbytes > self.budget) or store.full()):
                try:
                    victim = self._policy.victim(self._pins)
                except LookupError:
                    raise ParamError("cache", "budget", f"{self.budget} B cannot hold the {len(self._pins)} expert "
                                     "slices in use at once (a layer's routed experts; two layers' with --schedule eager)") from None
                self.evict(victim)
            ok = True
        finally:
            store.end(key, ok)
        store.take(key, nbytes)
        self._live[key] = nbytes
        self._live_bytes += nbytes
        self._pins[key] = self._pins.get(key, 0) + 1
        self._policy.admit(key)
        self._c.misses += 1
        self._c.bytes_read += nbytes
        return self._reader_kind(key)

    def complete(self, key: SliceKey, outcome: ReadOutcome, kind: str = "") -> None:
        """Count a filled miss (``kind``: the reader kind :meth:`admit` returned)."""
        self._c.count_read(outcome)
        if kind == "pread" and self.reader_kinds[self.file_of(key)] != "pread":
            self._c.gated_reads += 1  # the gate sent it to the page cache instead of the placement's reader

    def pin(self, key: SliceKey) -> None:
        """Pin a live entry without counting a lookup or telling the policy (a prefetch keeping what it named)."""
        if key not in self._live:
            raise KeyError(f"{key} is not in the cache")
        self._pins[key] = self._pins.get(key, 0) + 1

    def unpin(self, key: SliceKey) -> None:
        left = self._pins[key] - 1
        if left:
            self._pins[key] = left
        else:
            del self._pins[key]
            if getattr(self._policy, "passing", None) and self._policy.passing(key):
                self.evict(key)  # served, and not kept: a static placement's cold expert

    def stage(self, key: SliceKey) -> bool:
        """Make ``key`` live on this thread (reading it on a miss); True on a hit."""
        if self.lookup(key):
            return True
        kind = self.admit(key)
        try:
            self.complete(key, self.fill(key, self.reader(kind, self.file_of(key))), kind)
        finally:
            self.unpin(key)
        return False

    def evict(self, key: SliceKey) -> None:
        """Drop a live entry and release its pages by the boundary rule."""
        if key in self._pins:
            raise ValueError(f"{key} is in use (pinned) and cannot be evicted")
        nbytes = self._live.pop(key)
        self._policy.forget(key)
        self._live_bytes -= nbytes
        self._c.evictions += 1
        self._c.released_pages += self._store.give(key)

    # --- any thread: reading a miss's bytes into its slot -------------------------------------------
    def fill(self, key: SliceKey, reader: SliceReader) -> ReadOutcome:
        """Read an admitted entry's bytes into its slot with ``reader`` (safe from a lane thread)."""
        offset, nbytes = self.layouts[key.blob].slice(key.expert)
        region, at = self._store.region(key)
        try:
            # The in-place promise holds for every per-blob placement: the region is the pages this entry
            # commits, and inside it slot and file differ by a constant, so overhung bytes get their own
            # contents. A pool's frame starts on a page: no promise.
            return reader.read_into(region, at, offset, nbytes, allow_in_place=self._store.in_place)
        finally:
            region.release()

    def file_of(self, key: SliceKey) -> str:
        return self.blobs[key.blob].file or self.path

    def reader(self, kind: str, file: str) -> SliceReader:
        """This cache's own reader of ``kind`` on ``file`` (for :meth:`stage`; lanes keep their own)."""
        r = self._readers.get((kind, file))
        if r is None:
            r = self._readers[(kind, file)] = make_reader(kind, file)
        return r

    def _reader_kind(self, key: SliceKey) -> str:
        file = self.file_of(key)
        return gated_reader(self.reader_kinds[file], self.gate, self.gate_scope, self.file_gate_resident, file,
                            self.blobs[key.blob].span)

    # --- reading back and accounting ------------------------------------------------------------
    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def __len__(self) -> int:
        return len(self._live)

    def live_keys(self) -> list[SliceKey]:
        """The live entries, oldest admission first."""
        return list(self._live)

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        """The per-blob reservations, in blob order; the pool's one mapping under ``placement="pool"``."""
        return self._store.reservations

    def view(self, key: SliceKey) -> memoryview:
        """The live entry's bytes in its slot (release the view before :meth:`close`)."""
        if key not in self._live:
            raise KeyError(f"{key} is not in the cache")
        return self._store.view(key, self._live[key])

    def counters(self) -> CacheCounters:
        self._c.recycled_pages = self._store.recycled
        return self._c.snapshot()

    def memory(self, measure: bool = True) -> CacheMemory:
        """Accounted vs committed vs unreleased pages, and (``measure``) resident and lazily-freed pages."""
        return self._store.memory(len(self._live), self._live_bytes, measure)

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()
        self._store.close()

    def __enter__(self) -> "ExpertCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

