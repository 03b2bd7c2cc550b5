"""Per-token latency and stall percentiles: p50, p90, p99 and max over the tokens a session decoded.

A token's time is the decode thread's from its first layer's routing to the next token's (the last
token of a turn: to the end of its last layer's compute), so a turn's tokens add up to its decode
time; its stall is the part of that spent waiting for reads, uploads and routing (``stall_read_s +
stall_upload_s + stall_route_s`` of the turn, token by token). Every turn keeps its tokens' raw times
(:attr:`~workbench.expert.session_records.TurnRecord.token_s`), so the percentiles of any set of turns
are exact, never merged from the turns' own.

Percentiles are nearest-rank (the ``p``-th is the ``⌈p·n/100⌉``-th smallest; numpy's ``inverted_cdf``):
each is a time some token took. The tail a
percentile describes rests on the tokens at or above it — p99 of 64 tokens is the slowest one — so
every p99 carries :func:`p99_caveat`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

PERCENTILES = (50, 90, 99)
P99_MIN_TOKENS = 100  # below this the 1 % tail is not one token: p99 is the slowest token


@dataclass(frozen=True)
class TokenTail:
    """Nearest-rank percentiles of ``n`` per-token seconds."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float

    def ms(self) -> dict[str, float]:
        return {"p50": self.p50 * 1e3, "p90": self.p90 * 1e3, "p99": self.p99 * 1e3, "max": self.max * 1e3}


def tail(samples: Iterable[float]) -> TokenTail | None:
    """The percentiles of ``samples`` (None when there are none)."""
    values = sorted(float(v) for v in samples)
    if not values:
        return None
    p50, p90, p99 = (values[max(1, math.ceil(p * len(values) / 100)) - 1] for p in PERCENTILES)
    return TokenTail(len(values), p50, p90, p99, values[-1])


def tokens_above_p99(n: int) -> int:
    """How many of ``n`` tokens sit at or above the nearest-rank p99: what the p99 rests on."""
    return n - math.ceil(0.99 * n) + 1


def p99_caveat(n: int) -> str:
    """What a p99 of ``n`` tokens rests on, in words."""
    if n < P99_MIN_TOKENS:
        return f"n = {n} tokens; p99 is the slowest token: fewer than {P99_MIN_TOKENS}"
    return f"n = {n} tokens; p99 rests on the slowest {tokens_above_p99(n)}"


def turn_tokens(turns: Sequence[Any], key: str = "token_s") -> list[float]:
    """Every token's seconds (``token_s``) or stall (``token_stall_s``) over ``turns``, in order."""
    return [float(v) for t in turns for v in (getattr(t, key, None) or ())]


def tail_fields(turns: Sequence[Any]) -> dict[str, Any]:
    """The summary's per-token fields: ``token_n``, ``token_{p50,p90,p99,max}_ms`` and the same for the
    stall, with ``stall_ms_per_token`` (the mean) and ``token_p99_note`` (what the p99s rest on:
    :func:`p99_caveat`); None (and "") where no turn recorded its tokens."""
    out: dict[str, Any] = {"token_n": 0, "token_p99_note": "", "stall_ms_per_token": None}
    for prefix, key in (("token", "token_s"), ("stall", "token_stall_s")):
        found = tail(turn_tokens(turns, key))
        for name in ("p50", "p90", "p99", "max"):
            out[f"{prefix}_{name}_ms"] = found.ms()[name] if found else None
        if found and prefix == "token":
            out["token_n"], out["token_p99_note"] = found.n, p99_caveat(found.n)
        if found and prefix == "stall":
            out["stall_ms_per_token"] = statistics.fmean(turn_tokens(turns, key)) * 1e3
    return out


def tail_line(fields: Any) -> str:
    """The summary's per-token sentence from :func:`tail_fields`' values (a dict or the summary)."""
    get = fields.get if isinstance(fields, dict) else lambda k: getattr(fields, k, None)
    n = get("token_n") or 0
    if not n:
        return "per-token times not recorded"
    ms = lambda p: ", ".join(f"{q} {get(f'{p}_{q}_ms'):.2f}" for q in ("p50", "p90", "p99", "max"))  # noqa: E731
    return (f"per token ms {ms('token')}; stall ms {ms('stall')} (mean {get('stall_ms_per_token'):.2f}) "
            f"({p99_caveat(n)})")
