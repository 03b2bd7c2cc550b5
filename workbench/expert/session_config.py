"""What a session is asked to do (:class:`SessionConfig`, the CLI's flags one to one), its checks, and
where its routing comes from."""
from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import ParamError
from workbench.expert.cache import BOUNDARY_RELEASE, GATE_SCOPES
from workbench.expert.cache_options import CACHE_PLACEMENTS, check_pool
from workbench.expert.compute import parse_compute
from workbench.expert.eager import check_schedule
from workbench.expert.lanes import HANDOFFS, MAX_SWITCH_US
from workbench.expert.memory import release_advice_flag
from workbench.expert.miss.batch import check_batch
from workbench.expert.miss.server import check_miss
from workbench.expert.policies.partition import check_session_policy
from workbench.expert.prefetch.spec import check_prefetch
from workbench.expert.readers import READERS
from workbench.expert.routing import DISTRIBUTIONS, RoutingTrace, load_trace, moe_shape, synthetic_trace
from workbench.expert.session_bounds import check_bounds
from workbench.expert.session_defaults import default_k
from workbench.expert.uploader import UPLOADERS
from workbench.formats.index import TensorIndex


@dataclass(frozen=True)
class SessionConfig:
    """Everything a session is asked to do (the CLI's flags, one to one)."""

    turns: int
    tokens: int  # decode tokens per turn
    cache_mib: float | None = None  # None: half the expert bytes, at least two tokens' working set
    cache_experts: int | None = None  # per-layer caches of N experts instead of a byte budget (expert.policies)
    experts_per_token: int | None = None  # None: the trace file's k, else a quarter of the experts (1–8)
    placement: str = "inplace"  # inplace | bounce | aligned | pool (a page-locked pool of frames: expert.pool)
    boundary_release: str = "on"  # on | off
    release_advice: str = "dontneed"  # how evicted pages go back: dontneed (MADV_DONTNEED) | free (MADV_FREE)
    uploader: str = "pageable"  # pageable (copies from the cache) | pinned (through page-locked staging)
    upload_threads: int = 1  # threads copying landed slices out of the cache (either uploader)
    trace: str | None = None  # CSV or .npy path; None: a synthetic trace
    distribution: str = "uniform"  # synthetic: uniform | zipf
    zipf_s: float = 1.2
    seed: int = 0
    reader: str = "auto"  # auto | pread | direct-bounce | direct-inplace
    policy: str = "lru"
    verify: bool = False  # read every upload back and compare with the file (tests; slows turns)
    verify_end: bool = False  # after each turn (untimed) the last layer's uploads, at the end the cache
    compute: str = "none"  # none | sleep:MS | device
    lanes: int = 1  # reader threads for misses (1 without overlap: on the decode thread)
    overlap: bool = False  # read the next layer's misses while this layer computes
    batch_misses: bool = False  # a layer's misses read and uploaded together by the lanes (expert.miss.batch)
    schedule: str = "landed"  # when overlap plans the next layer: landed (after this one) | eager (expert.eager)
    switch_interval_us: int = 0  # the interpreter's switch interval during the session, µs (0: Python's, as it is)
    lane_handoff: str = "executor"  # how jobs reach the lanes and come back: executor (futures) | lock (expert.lanes)
    miss: str = "fetch"  # how a miss is served: fetch | host (computed where it lies) | auto (expert.miss)
    prefetch: str = "route"  # what overlap stages ahead: route | none | previous | popularity | oracle (.prefetch.spec)
    gate: float | None = None  # resident fraction at which a miss is read buffered (None: off)
    gate_scope: str = "blob"  # blob: measured at each miss; file: the whole model once, at the start
    steady_window: int = 5  # turns in fio's trailing steady-state window
    steady_slope_pct: float = 2.0  # the window's slope limit, % of its mean per turn
    memory_limit_mib: float | None = None  # run under this much memory (the parent enforces it)

    @property
    def cache_bytes(self) -> int | None:
        return None if self.cache_mib is None else int(self.cache_mib * 2**20)


def check_config(c: SessionConfig) -> None:
    """ParamError (one line) for settings no session can run with."""
    check_bounds(c)  # every number in its range, every float finite (session_bounds.py)
    for name in ("turns", "tokens", "lanes", "steady_window", "upload_threads"):
        low = 2 if name == "steady_window" else 1
        if not isinstance(getattr(c, name), int) or getattr(c, name) < low:
            raise ParamError("session", name, f"must be an integer >= {low}, got {getattr(c, name)!r}")
    for name in ("cache_mib", "memory_limit_mib"):
        value = getattr(c, name)
        if value is not None and not value > 0:
            raise ParamError("session", name, f"must be > 0, got {value!r}")
    if not c.steady_slope_pct > 0:
        raise ParamError("session", "steady_slope_pct", f"must be > 0, got {c.steady_slope_pct!r}")
    if c.experts_per_token is not None and c.experts_per_token < 1:
        raise ParamError("session", "experts_per_token", f"must be >= 1, got {c.experts_per_token!r}")
    if c.gate is not None and not 0.0 <= c.gate <= 1.0:
        raise ParamError("session", "gate", f"must be a resident fraction in [0, 1], got {c.gate!r}")
    if not 0 <= c.switch_interval_us <= MAX_SWITCH_US:
        raise ParamError("session", "switch_interval_us", f"must be 0 (Python's own) or 1–{MAX_SWITCH_US:,} µs, "
                                                          f"got {c.switch_interval_us!r}")
    parse_compute(c.compute)
    check_session_policy(c)
    check_prefetch(c.prefetch, c.overlap)
    check_miss(c.miss)
    check_batch(c.batch_misses, c.lanes, c.overlap, c.prefetch, c.uploader, c.upload_threads)
    check_schedule(c.schedule, c.overlap, c.prefetch, c.batch_misses)
    release_advice_flag(c.release_advice, "session")  # unknown, or MADV_FREE where this platform has none
    for name, known in (("placement", CACHE_PLACEMENTS), ("boundary_release", BOUNDARY_RELEASE),
                        ("reader", ("auto", *READERS)), ("distribution", DISTRIBUTIONS),
                        ("gate_scope", GATE_SCOPES), ("uploader", UPLOADERS), ("lane_handoff", HANDOFFS)):
        if getattr(c, name) not in known:
            raise ParamError("session", name, f"{getattr(c, name)!r} is not one of {', '.join(known)}")
    check_pool(c.placement, c.reader, c.boundary_release, "session", c.release_advice)


def routing(index: TensorIndex, config: SessionConfig) -> tuple[RoutingTrace, str]:
    """The session's routing trace and a note about it (a file trace replayed, …)."""
    layers, n_experts = moe_shape(index.blobs)
    k = config.experts_per_token
    if config.trace is None:
        k = default_k(n_experts) if k is None else k
        trace = synthetic_trace(config.turns * config.tokens, layers, n_experts, k,
                                distribution=config.distribution, zipf_s=config.zipf_s, seed=config.seed)
        return trace, ""
    need = config.turns * config.tokens
    trace = load_trace(config.trace, layers=layers, n_experts=n_experts, tokens=need, seed=config.seed)
    if k is not None and k != trace.k:
        raise ParamError("session", "experts_per_token", f"{k} but the trace routes {trace.k} per layer")
    note = f"trace of {trace.tokens} tokens replayed {need / trace.tokens:.1f} times" if need > trace.tokens else ""
    return trace, "; ".join(n for n in (trace.note, note) if n)
