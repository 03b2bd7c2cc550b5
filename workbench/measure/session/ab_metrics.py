"""What a session A/B compares, and what it only shows: each a function of a cell's turns (those after
the first, the cache filling, when a cell has three or more).

:data:`METRICS` get a ratio with its interval and a verdict; :data:`SHOWN` stand beside them in each
cell's figures with none — what an arm changes by design (the shift copy of a placement, a predictor's
precision and recall and the bytes it read ahead), or a count a metric rests on (``tokens``). The
per-token percentiles are nearest-rank over the cell's tokens (:mod:`workbench.records.token_tail`),
so a p99 effect carries what each cell's p99 rests on (:func:`metric_caveat`); -1 where the turns were
recorded before the figure existed, and a metric whose cells read 0 gets no ratio.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from workbench.expert.prefetch.tally import precision_recall
from workbench.records.token_tail import p99_caveat, tail, turn_tokens

_tokens = lambda ts: sum(t.tokens for t in ts)  # noqa: E731


def _tail_ms(key: str, which: str) -> Callable[[Sequence[Any]], float]:
    def value(ts: Sequence[Any]) -> float:
        found = tail(turn_tokens(ts, key))
        return found.ms()[which] if found else 0.0
    return value


def _stall_mean_ms(ts: Sequence[Any]) -> float:
    stalls = turn_tokens(ts, "token_stall_s")
    return sum(stalls) / len(stalls) * 1e3 if stalls else 0.0


def _prefetch(ts: Sequence[Any], which: str) -> float:
    """Precision, recall, or a prefetch byte count per token in MiB; -1 where no predictor ran."""
    if any(getattr(t, "prefetch_named", -1) < 0 for t in ts):
        return -1.0
    total = lambda key: sum(getattr(t, key) for t in ts)  # noqa: E731
    if which in ("precision", "recall"):
        p, r = precision_recall(total("prefetch_named"), total("prefetch_right"), total("prefetch_routed"))
        found = p if which == "precision" else r
        return -1.0 if found is None else found
    return total(which) / _tokens(ts) / 2**20


def _landed_over_stall(ts: Sequence[Any]) -> float:
    """Expert bytes landed on the device over the tokens' summed stall, GB/s; -1 where nothing stalled."""
    stalled = sum(turn_tokens(ts, "token_stall_s"))
    return sum(t.landed_bytes for t in ts) / 1e9 / stalled if stalled > 0 else -1.0


def _skipped_share(ts: Sequence[Any]) -> float:
    """Of the layers a predictor was asked about, those planned to run on the host (nothing staged, not
    scored); -1 where no predictor ran or the turns were recorded before the skip was counted."""
    if any(getattr(t, "prefetch_named", -1) < 0 or getattr(t, "prefetch_skipped_layers", -1) < 0 for t in ts):
        return -1.0
    skipped = sum(t.prefetch_skipped_layers for t in ts)
    return skipped / max(1, skipped + sum(t.prefetch_layers for t in ts))


# metric → (per-cell value from the turns after the first, higher is better?)
METRICS: dict[str, tuple[Callable[[Sequence[Any]], float], bool]] = {
    "tok/s": (lambda ts: sum(t.tokens for t in ts) / max(1e-12, sum(t.seconds for t in ts)), True),
    "residual s/token": (lambda ts: sum(t.residual_s_per_token * t.tokens for t in ts) / _tokens(ts), False),
    "bookkeeping s/token": (lambda ts: sum(max(0.0, t.bookkeeping_s) for t in ts) / _tokens(ts), False),
    "staged GB/s": (lambda ts: sum(t.bytes_read for t in ts) / 1e9 / sum(t.read_busy_s for t in ts)
                    if sum(t.read_busy_s for t in ts) > 0 else 0.0, True),
    "unreleased pages": (lambda ts: float(ts[-1].unreleased_pages), False),
    "major faults/token": (lambda ts: sum(t.majflt for t in ts) / sum(t.tokens for t in ts), False),
    "disk MiB/token": (lambda ts: sum(t.disk_bytes_per_token * t.tokens for t in ts) / sum(t.tokens for t in ts)
                       / 2**20, False),
    "refaults/token": (lambda ts: sum(max(0, t.cg_refaults) for t in ts) / sum(t.tokens for t in ts), False),
    **{f"token {q} ms": (_tail_ms("token_s", q), False) for q in ("p50", "p90", "p99", "max")},
    "stall ms/token": (_stall_mean_ms, False),
    **{f"stall {q} ms": (_tail_ms("token_stall_s", q), False) for q in ("p50", "p90", "p99", "max")},
}
# shown beside the metrics in a cell's figures, compared by no verdict
SHOWN: dict[str, Callable[[Sequence[Any]], float]] = {
    "shift MiB/token": lambda ts: sum(t.shift_copy_bytes for t in ts) / _tokens(ts) / 2**20,
    "shift ms/token": lambda ts: sum(max(0.0, t.shift_copy_s) for t in ts) / _tokens(ts) * 1e3,
    "cores busy": lambda ts: (sum(t.cpu_user_s + t.cpu_sys_s for t in ts) / max(1e-12, sum(t.seconds for t in ts))
                              if all(t.cpu_user_s >= 0 for t in ts) else -1.0),  # -1: turns recorded before it
    "tokens": lambda ts: float(len(turn_tokens(ts))),  # what each cell's percentiles rest on
    # the cache's hit rate: what a policy or cache-size arm changes by design (a trace's is exact, no noise)
    "hit rate": lambda ts: sum(t.hits for t in ts) / max(1, sum(t.hits + t.misses for t in ts)),
    "precision": lambda ts: _prefetch(ts, "precision"),
    "recall": lambda ts: _prefetch(ts, "recall"),
    "prefetch MiB/token": lambda ts: _prefetch(ts, "prefetch_bytes"),
    "unused MiB/token": lambda ts: _prefetch(ts, "prefetch_unused_bytes"),
    "never used MiB/token": lambda ts: _prefetch(ts, "prefetch_never_used_bytes"),
    # layers run on the host: a predictor stages nothing there, and precision and recall leave them out
    "skipped share": _skipped_share,
    "skipped MiB/token": lambda ts: _prefetch(ts, "prefetch_skipped_bytes") if _skipped_share(ts) >= 0 else -1.0,
    # how misses were served (--miss): what a miss arm changes by design; -1 for turns recorded before
    "host share": lambda ts: (sum(t.miss_host for t in ts) / max(1, sum(t.miss_host + t.miss_fetched for t in ts))
                              if all(t.miss_fetched >= 0 for t in ts) else -1.0),
    # the miss path's like-for-like rate (issue 34 §5): expert bytes landed on the device over the time the
    # tokens waited; against a ring's rate it is the share the goal names; its ratio is 1 / the stall's when
    # both arms land the same bytes; -1 where nothing stalled
    "landed GB/s over stall": _landed_over_stall,
    "fetch ms/token": lambda ts: sum(t.stall_read_s + t.stall_upload_s for t in ts) / _tokens(ts) * 1e3,
    "host ms/token": lambda ts: sum(t.host_compute_s for t in ts) / _tokens(ts) * 1e3,
    "device ms/token": lambda ts: sum(t.compute_s for t in ts) / _tokens(ts) * 1e3,
}


def metric_caveat(metric: str, figures: Sequence[dict[str, float] | None]) -> str:
    """For a p99 metric: what each cell's p99 rests on (the fewest tokens of any cell); else ""."""
    if "p99" not in metric:
        return ""
    counts = [int(f["tokens"]) for f in figures if f is not None and f.get("tokens", 0) > 0]
    if not counts:
        return ""
    return f"(each cell's p99: {p99_caveat(min(counts))})"
