"""What a predictor did in a turn: how right it was, and what its reads cost.

Precision and recall count experts, per (token, layer) the predictor was asked about: ``right`` is
``|named ∩ routed|``, precision ``right / named``, recall ``right / routed``. A turn's first layer is
never asked (nothing is staged across a turn's end), so ``routed`` counts only the layers that were.

Bytes count cache entries (one expert of one blob) the prefetch read: ``prefetch_bytes`` all of them,
``prefetch_unused_bytes`` those the layer they were staged for did not route to (a later token may
still hit them in the cache: that is a hit, not the prediction's), ``prefetch_never_used_bytes`` those
evicted before any token used them (found when they are routed or named again, or at the turn's end:
no sweep over the cache per layer; what is still live and unused at a turn's end is
``prefetch_idle_bytes``), ``prefetch_late_bytes`` those a later token routed while they were still
cached (its hit). So every byte read ahead unused ends in one of the three: ``unused = never used +
late + idle`` over a session. ``prefetch_dropped`` entries the cache could not take (its
budget held by entries in use).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Sequence

@dataclass
class PrefetchTally:
    """One turn's counts (the turn record's ``prefetch_*`` fields; -1 there when no predictor ran)."""

    prefetch_named: int = 0
    prefetch_right: int = 0
    prefetch_routed: int = 0
    prefetch_bytes: int = 0
    prefetch_unused_bytes: int = 0
    prefetch_never_used_bytes: int = 0
    prefetch_late_bytes: int = 0
    prefetch_idle_bytes: int = 0
    prefetch_dropped: int = 0

    def score(self, named: Sequence[int], routed: Sequence[int]) -> None:
        """Count one (token, layer): what was named against what was routed."""
        named_set = set(named)
        self.prefetch_named += len(named_set)
        self.prefetch_routed += len(set(routed))
        self.prefetch_right += len(named_set.intersection(routed))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


TALLY_KEYS = tuple(f.name for f in fields(PrefetchTally))  # the turn record's prefetch_* keys


def precision_recall(named: int, right: int, routed: int) -> tuple[float | None, float | None]:
    """(precision, recall); None where nothing was named (precision) or nothing routed (recall)."""
    return (right / named if named > 0 else None), (right / routed if routed > 0 else None)


def tally_fields(turns: Sequence[Any]) -> dict[str, Any]:
    """The summary's prefetch fields over ``turns``: totals, precision and recall (None: no predictor)."""
    ran = [t for t in turns if getattr(t, "prefetch_named", -1) >= 0]
    out: dict[str, Any] = {key: sum(getattr(t, key) for t in ran) if ran else -1 for key in TALLY_KEYS}
    out["prefetch_idle_bytes"] = ran[-1].prefetch_idle_bytes if ran else -1  # a state at the end, not a sum
    p, r = precision_recall(out["prefetch_named"], out["prefetch_right"], out["prefetch_routed"]) if ran else (None,
                                                                                                            None)
    return {**out, "prefetch_precision": p, "prefetch_recall": r}


def tally_line(fields: Any, tokens: int) -> str:
    """The summary's prefetch sentence (empty when no predictor ran)."""
    get = fields.get if isinstance(fields, dict) else lambda k: getattr(fields, k, None)
    named = get("prefetch_named")
    if named is None or named < 0:
        return ""
    p, r = get("prefetch_precision"), get("prefetch_recall")
    shown = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    mib = 2**20
    return (f"prefetch precision {shown(p)}, recall {shown(r)} ({get('prefetch_right'):,} right of "
            f"{get('prefetch_named'):,} named, {get('prefetch_routed'):,} routed); read ahead "
            f"{get('prefetch_bytes') / mib / tokens:.2f} MiB/token, of it unused by its layer "
            f"{get('prefetch_unused_bytes') / mib / tokens:.2f}, evicted never used "
            f"{get('prefetch_never_used_bytes') / mib / tokens:.2f}, a later token's hit {get('prefetch_late_bytes') / mib / tokens:.2f} "
            f"({get('prefetch_idle_bytes') / mib:.2f} MiB still "
            f"unused at the end); dropped {get('prefetch_dropped'):,}")
