"""Long sessions in the PR table: a line per session attempt, and what engaged in it.

A session attempt (``kind`` ``session``) has turns, not runs; its row in the table shows its turn times,
and these lines under the table show what only turns can: how the unreleased pages and the anonymous
memory the cache does not account for moved from the first turn to the last, faults and tokens/s.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from workbench.records.token_tail import tail_fields, tail_line
from workbench.output.untrusted import for_markdown, for_markdown_code

if TYPE_CHECKING:
    import pandas as pd


def session_lines(attempts: pd.DataFrame, turns: pd.DataFrame) -> list[str]:
    """One line per session attempt: unreleased pages first → last turn against the most the model can
    leak, the anonymous memory the cache does not account for, faults, tokens/s and where the time
    went — what tells a leak (it grows toward its bound) from a cost (it does not)."""
    if turns.empty:
        return []
    labels = dict(zip(attempts["id"], attempts["label"]))
    facts = {a: ((e or {}).get("session") or {}) for a, e in zip(attempts["id"], attempts.get("environment", []))}
    out = []
    for attempt_id, t in turns.groupby("attempt_id", sort=False):
        if attempt_id not in labels:
            continue
        t = t.sort_values("turn")
        first, last = t.iloc[0], t.iloc[-1]
        rates = t["tokens_per_s"].astype(float)
        bound = int(facts.get(attempt_id, {}).get("leak_bound_pages") or 0)
        of_bound = f" of the {bound:,} the model can leak" if bound else ""
        out.append(
            f"`{for_markdown_code(str(attempt_id)[:8])}` {for_markdown(labels[attempt_id])}: {len(t)} turns × "
            f"{int(first['tokens'])} tokens; "
            f"unreleased pages {int(first['unreleased_pages']):,} → {int(last['unreleased_pages']):,}{of_bound} "
            f"(first → last turn); anon − accounted {anon_gap_mib(first):.1f} → {anon_gap_mib(last):.1f} MiB; faults {int(t['minflt'].sum()):,} "
            f"minor, {int(t['majflt'].sum()):,} major; tok/s median {rates.median():.1f} "
            f"({rates.min():.1f}–{rates.max():.1f}){_decode(t)}")
    return out


def _decode(t: pd.DataFrame) -> str:
    """Where the time went, from the turns' extra fields (sessions recorded before them have none)."""
    extra = [e if isinstance(e, dict) else {} for e in t.get("extra", [])]
    if not extra or "residual_s_per_token" not in extra[-1]:
        return ""
    tokens = t["tokens"].astype(float)
    residual = sum(e.get("residual_s_per_token", 0.0) * n for e, n in zip(extra, tokens)) / tokens.sum()
    hits = sum(e.get("hit_rate", 0.0) * n for e, n in zip(extra, tokens)) / tokens.sum()
    read = sum(e.get("stall_read_s", 0.0) for e in extra)
    book = [e["bookkeeping_s"] for e in extra if e.get("bookkeeping_s", -1) >= 0]  # none before it was timed
    books = f", bookkeeping {sum(book) / tokens.sum() * 1e3:.2f} ms/token" if len(book) == len(extra) else ""
    return (f"; residual {residual * 1e3:.2f} ms/token{books}, read stalls {read:.2f} s, hit rate {hits:.0%}"
            f"{_tokens(extra)}{_prefetched(extra)}")


def _tokens(extra: list[dict[str, Any]]) -> str:
    """Per-token latency and stall percentiles over every turn's tokens (none before they were recorded)."""
    fields = token_fields(extra)
    return f"; {tail_line(fields)}" if fields["token_n"] else ""


def token_fields(extra: Any) -> dict[str, Any]:
    """:func:`~workbench.records.token_tail.tail_fields` over turn rows' ``extra`` (their raw token times)."""
    extra = [e if isinstance(e, dict) else {} for e in extra]
    return tail_fields([SimpleNamespace(token_s=e.get("token_s") or (), token_stall_s=e.get("token_stall_s") or ())
                        for e in extra])


def _prefetched(extra: list[dict[str, Any]]) -> str:
    """A predictor's precision and recall, and what it read ahead unused (none without a predictor)."""
    ran = [e for e in extra if e.get("prefetch_named", -1) >= 0]
    if not ran:
        return ""
    named, right, routed, read, unused = (sum(int(e.get(f"prefetch_{k}", 0)) for e in ran)
                                          for k in ("named", "right", "routed", "bytes", "unused_bytes"))
    ratio = lambda a, b: f"{a / b:.2f}" if b > 0 else "—"  # noqa: E731
    layers, nbytes = ([int(e.get(f"prefetch_skipped_{k}", -1)) for e in ran] for k in ("layers", "bytes"))
    counted = min(layers + nbytes, default=-1) >= 0  # -1: turns recorded before the skip was counted
    host = (f"; {sum(layers):,} layers run on the host skipped ({sum(nbytes) / 2**20:.1f} MiB not staged), "
            "not scored" if counted and sum(layers) else "")
    return (f"; prefetch precision {ratio(right, named)}, recall {ratio(right, routed)}, read ahead "
            f"{read / 2**20:.1f} MiB, {unused / 2**20:.1f} unused by its layer{host}")


def session_facts(a: dict[str, Any]) -> str:
    """What engaged in a long session (its placement report, reader, boundary rule), from its environment."""
    facts = (a.get("environment") or {}).get("session") or {}
    if not facts:
        return "—"
    head, _, tail = str(facts.get("placement_report", "")).partition(" — ")
    advice = facts.get("release_advice", "dontneed")
    lazily = {"dontneed": "", "recycle": f" (advice {advice}: evicted pages taken over by misses)"}.get(
        advice, f" (advice {advice}: pages handed back lazily)")
    return f"{head} ({tail}); reader {facts.get('reader')}; release {facts.get('boundary_release')}{lazily}"


def lazyfree_bytes(turns: Any) -> Any:
    """A turn row's (or a turns frame's, per row) ``lazyfree_bytes`` from its extra fields: what the
    cache handed back with MADV_FREE and the kernel had not reclaimed (0: none, unknown, or recorded before)."""
    one = lambda e: max(0, int(e.get("lazyfree_bytes", 0))) if isinstance(e, dict) else 0  # noqa: E731
    extra = turns.get("extra")
    if hasattr(turns, "columns"):
        return extra.map(one) if extra is not None else 0
    return one(extra)


def anon_gap_mib(turns: Any) -> Any:
    """Anonymous memory the cache does not account for, in MiB: ``actual_anon - lazyfree - accounted``
    (lazily-freed pages are the kernel's to take: neither held nor leaked)."""
    return (turns["actual_anon_bytes"] - lazyfree_bytes(turns) - turns["accounted_bytes"]) / 2**20
