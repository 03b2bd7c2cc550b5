"""A long-lived decode session: turns × tokens of routed experts staged through the expert cache and
uploaded to a device, recorded per turn.

Why: a single-shot load in a fresh process cannot see what builds up over time — the second
write-up's boundary-page leak was invisible in 24-40-token runs and cost 40 MiB a turn in the app's
long session. Each token walks the MoE layers in order; in each layer it stages its ``k`` routed
experts (every blob of the layer: gate, up, down, …) through the cache and copies each slice into a
device arena that the next layer reuses, as an engine's compute would consume them.

Library use (the CLI and the ledger build on it)::

    with ExpertSession(index, device, SessionConfig(turns=20, tokens=64, cache_mib=512)) as s:
        print(s.facts.placement_report)
        for record in s.turns():
            ...
        report = s.report()          # SessionReport; report.to_json() is `session --json`

or ``for record in run_session(index, device, turns=20, tokens=64, cache_mib=512): ...``.
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Iterator

from workbench.errors import ParamError, VerificationError
from workbench.expert.cache import BOUNDARY_RELEASE, ExpertCache, SliceKey
from workbench.expert.layout import PLACEMENTS
from workbench.expert.policy import POLICIES
from workbench.expert.readers import READERS
from workbench.expert.memory import process_memory
from workbench.expert.routing import DISTRIBUTIONS, RoutingTrace, load_trace, moe_shape, synthetic_trace
from workbench.expert.session_records import SessionFacts, SessionReport, TurnRecord, summarize
from workbench.formats.index import TensorIndex
from workbench.upload.base import Device


@dataclass(frozen=True)
class SessionConfig:
    """Everything a session is asked to do (the CLI's flags, one to one)."""

    turns: int
    tokens: int  # decode tokens per turn
    cache_mib: float
    experts_per_token: int | None = None  # None: the trace file's k, else min(8, experts per layer)
    placement: str = "inplace"  # inplace | bounce | aligned
    boundary_release: str = "on"  # on | off
    trace: str | None = None  # CSV or .npy path; None: a synthetic trace
    distribution: str = "uniform"  # synthetic: uniform | zipf
    zipf_s: float = 1.2
    seed: int = 0
    reader: str = "auto"  # auto | pread | direct-bounce | direct-inplace
    policy: str = "lru"
    verify: bool = False  # read every upload back and compare with the file (tests; slows turns)

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_mib * 2**20)


class ExpertSession:
    """One session over ``index`` on ``device``; :meth:`turns` runs ``config.turns`` turns."""

    def __init__(self, index: TensorIndex, device: Device, config: SessionConfig):
        check_config(config)
        self.index, self.device, self.config = index, device, config
        self.trace, trace_note = _routing(index, config)
        self.cache = ExpertCache(index.path, index.blobs, budget_bytes=config.cache_bytes,
                                 placement=config.placement, boundary_release=config.boundary_release,
                                 reader=config.reader, policy=config.policy)
        self._by_layer = {layer: [i for i, b in enumerate(index.blobs) if b.layer == layer]
                          for layer in self.trace.layers}
        try:  # the arena a layer's routed experts are copied into; the cache is closed if it fails
            self._arena = device.alloc(self.trace.k * max(
                sum(max(n for _, n in index.blobs[i].slices) for i in ids) for ids in self._by_layer.values()))
        except BaseException:
            self.cache.close()
            raise
        self._verify_fd = os.open(index.path, os.O_RDONLY | os.O_CLOEXEC) if config.verify else -1
        self._records: list[TurnRecord] = []
        self._next_token, self.verified_slices = 0, 0
        f = self.cache.facts
        self.facts = SessionFacts(
            f.placement, str(f.placement_report), f.placement_report.state, f.reader, f.reader_note,
            f.boundary_release, f.policy, f.budget_bytes, f.reserved_bytes, self.trace.k, self.trace.source,
            trace_note, device.info().name, config.verify)

    def turns(self) -> Iterator[TurnRecord]:
        """Run the configured number of turns, yielding each turn's record as it ends."""
        for _ in range(self.config.turns):
            yield self.run_turn()

    def run_turn(self) -> TurnRecord:
        """One turn of ``config.tokens`` tokens; timed from the first staging to the last copy's end."""
        before, ru0 = self.cache.counters(), resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        for _ in range(self.config.tokens):
            self._decode_token(self._next_token)
            self._next_token += 1
        self.device.synchronize()
        seconds = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        c, mem = self.cache.counters().minus(before), self.cache.memory()
        n = self.config.tokens
        record = TurnRecord(
            turn=len(self._records), tokens=n, bytes_read=c.bytes_read, hits=c.hits, misses=c.misses,
            evictions=c.evictions, minflt=ru1.ru_minflt - ru0.ru_minflt, majflt=ru1.ru_majflt - ru0.ru_majflt,
            accounted_bytes=mem.accounted_bytes, actual_anon_bytes=process_memory().anon_bytes,
            unreleased_pages=mem.unreleased_pages, seconds=seconds, tokens_per_s=n / max(seconds, 1e-12),
            shift_copy_bytes=c.shift_copy_bytes, resident_bytes=mem.resident_bytes)
        self._records.append(record)
        return record

    def _decode_token(self, t: int) -> None:
        for i, layer in enumerate(self.trace.layers):
            at = 0
            for expert in self.trace.token(t)[i].tolist():
                for blob in self._by_layer[layer]:
                    at += self._stage_and_upload(SliceKey(blob, expert), at)

    def _stage_and_upload(self, key: SliceKey, at: int) -> int:
        self.cache.stage(key)
        view = self.cache.view(key)
        try:
            self.device.copy_h2d(self._arena, at, view)
            n = len(view)
        finally:
            view.release()
        if self._verify_fd >= 0:
            self._check_upload(key, at, n)
        return n

    def _check_upload(self, key: SliceKey, at: int, nbytes: int) -> None:
        self.device.synchronize()
        offset, _ = self.index.blobs[key.blob].slices[key.expert]
        if self.device.read_back(self._arena, at, nbytes) != os.pread(self._verify_fd, nbytes, offset):
            blob = self.index.blobs[key.blob]
            raise VerificationError(self.index.path, f"{blob.tensors[0]} expert {key.expert}",
                                    f"{nbytes} B staged through the {self.facts.placement} cache differ")
        self.verified_slices += 1

    def report(self) -> SessionReport:
        """The turns run so far and their summary."""
        return SessionReport(tuple(self._records), summarize(self._records, self.facts, self.verified_slices))

    def close(self) -> None:
        if self._verify_fd >= 0:
            os.close(self._verify_fd)
            self._verify_fd = -1
        self.device.free(self._arena)
        self.cache.close()

    def __enter__(self) -> "ExpertSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_session(index: TensorIndex, device: Device, *, turns: int, tokens: int, cache_mib: float,
                **options: object) -> Iterator[TurnRecord]:
    """Yield one :class:`TurnRecord` per turn of a session (options: the :class:`SessionConfig` fields)."""
    config = SessionConfig(turns=turns, tokens=tokens, cache_mib=cache_mib, **options)  # type: ignore[arg-type]
    with ExpertSession(index, device, config) as session:
        yield from session.turns()


def _routing(index: TensorIndex, config: SessionConfig) -> tuple[RoutingTrace, str]:
    layers, n_experts = moe_shape(index.blobs)
    k = config.experts_per_token
    if config.trace is None:
        k = min(8, n_experts) if k is None else k
        trace = synthetic_trace(config.turns * config.tokens, layers, n_experts, k,
                                distribution=config.distribution, zipf_s=config.zipf_s, seed=config.seed)
        return trace, ""
    trace = load_trace(config.trace, layers=layers, n_experts=n_experts)
    if k is not None and k != trace.k:
        raise ParamError("session", "experts_per_token", f"{k} but the trace routes {trace.k} per layer")
    need = config.turns * config.tokens
    note = f"trace of {trace.tokens} tokens replayed {need / trace.tokens:.1f} times" if need > trace.tokens else ""
    return trace, note


def check_config(c: SessionConfig) -> None:
    """ParamError (one line) for settings no session can run with."""
    for name in ("turns", "tokens"):
        if not isinstance(getattr(c, name), int) or getattr(c, name) < 1:
            raise ParamError("session", name, f"must be an integer >= 1, got {getattr(c, name)!r}")
    if not c.cache_mib > 0:
        raise ParamError("session", "cache_mib", f"must be > 0, got {c.cache_mib!r}")
    if c.experts_per_token is not None and c.experts_per_token < 1:
        raise ParamError("session", "experts_per_token", f"must be >= 1, got {c.experts_per_token!r}")
    for name, known in (("placement", PLACEMENTS), ("boundary_release", BOUNDARY_RELEASE),
                        ("reader", ("auto", *READERS)), ("policy", tuple(POLICIES)), ("distribution", DISTRIBUTIONS)):
        if getattr(c, name) not in known:
            raise ParamError("session", name, f"{getattr(c, name)!r} is not one of {', '.join(known)}")


__all__ = ["ExpertSession", "SessionConfig", "check_config", "run_session"]
