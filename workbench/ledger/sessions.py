"""Long sessions in the PR table: a line per session attempt, and what engaged in it.

A session attempt (``kind`` ``session``) has turns, not runs; its row in the table shows its turn times,
and these lines under the table show what only turns can: how the unreleased pages and the anonymous
memory the cache does not account for moved from the first turn to the last, faults and tokens/s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.untrusted import for_markdown, for_markdown_code

if TYPE_CHECKING:
    import pandas as pd


def session_lines(attempts: pd.DataFrame, turns: pd.DataFrame) -> list[str]:
    """One line per session attempt: unreleased pages first → last turn, the anonymous memory the cache
    does not account for, faults and tokens/s — what tells a leak (it grows) from a cost (it does not)."""
    if turns.empty:
        return []
    labels = dict(zip(attempts["id"], attempts["label"]))
    out = []
    for attempt_id, t in turns.groupby("attempt_id", sort=False):
        if attempt_id not in labels:
            continue
        t = t.sort_values("turn")
        first, last = t.iloc[0], t.iloc[-1]
        rates = t["tokens_per_s"].astype(float)
        out.append(
            f"`{for_markdown_code(str(attempt_id)[:8])}` {for_markdown(labels[attempt_id])}: {len(t)} turns × "
            f"{int(first['tokens'])} tokens; "
            f"unreleased pages {int(first['unreleased_pages']):,} → {int(last['unreleased_pages']):,} (first → last "
            f"turn); anon − accounted {_gap(first):.1f} → {_gap(last):.1f} MiB; faults {int(t['minflt'].sum()):,} "
            f"minor, {int(t['majflt'].sum()):,} major; tok/s median {rates.median():.1f} "
            f"({rates.min():.1f}–{rates.max():.1f})")
    return out


def session_facts(a: dict[str, Any]) -> str:
    """What engaged in a long session (its placement report, reader, boundary rule), from its environment."""
    facts = (a.get("environment") or {}).get("session") or {}
    if not facts:
        return "—"
    head, _, tail = str(facts.get("placement_report", "")).partition(" — ")
    return f"{head} ({tail}); reader {facts.get('reader')}; release {facts.get('boundary_release')}"


def _gap(turn: Any) -> float:
    return (turn["actual_anon_bytes"] - turn["accounted_bytes"]) / 2**20
