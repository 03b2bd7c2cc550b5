"""What a predictor did in a turn: how right it was, and what its reads cost.

Precision and recall count experts, per (token, layer) the prefetch staged for (``prefetch_layers``):
``right`` is ``|named ∩ routed|``, precision ``right / named``, recall ``right / routed``. A turn's first
layer is never staged for (nothing is staged across a turn's end), and a layer planned to run on the
host (``--miss host``, or an ``auto`` token the host computes) is skipped: its experts are computed where
they lie, so nothing is staged to the device for it and it is not scored. What it would have staged is
counted apart: ``prefetch_skipped_layers``, the experts the predictor named there
(``prefetch_skipped_named``) and the bytes of those not live in the cache then
(``prefetch_skipped_bytes``: the reads the skip saved). So ``routed`` counts only the layers scored.

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
    prefetch_layers: int = 0  # (token, layer)s staged for and scored: precision and recall are over these
    prefetch_skipped_layers: int = 0  # (token, layer)s planned to run on the host: nothing staged, not scored
    prefetch_skipped_named: int = 0  # experts the predictor named for them
    prefetch_skipped_bytes: int = 0  # the bytes those would have read (not live in the cache then)

    def score(self, named: Sequence[int], routed: Sequence[int]) -> None:
        """Count one (token, layer): what was named against what was routed."""
        named_set = set(named)
        self.prefetch_layers += 1
        self.prefetch_named += len(named_set)
        self.prefetch_routed += len(set(routed))
        self.prefetch_right += len(named_set.intersection(routed))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


TALLY_KEYS = tuple(f.name for f in fields(PrefetchTally))  # the turn record's prefetch_* keys
SKIP_KEYS = TALLY_KEYS[TALLY_KEYS.index("prefetch_layers"):]  # -1 in turns recorded before they were counted


def precision_recall(named: int, right: int, routed: int) -> tuple[float | None, float | None]:
    """(precision, recall); None where nothing was named (precision) or nothing routed (recall)."""
    return (right / named if named > 0 else None), (right / routed if routed > 0 else None)


def tally_fields(turns: Sequence[Any]) -> dict[str, Any]:
    """The summary's prefetch fields over ``turns``: totals, precision and recall (None: no predictor)."""
    ran = [t for t in turns if getattr(t, "prefetch_named", -1) >= 0]
    out: dict[str, Any] = {key: sum(getattr(t, key) for t in ran) if ran else -1 for key in TALLY_KEYS}
    for key in SKIP_KEYS:  # a turn recorded before the skip was counted says -1: so does the sum
        out[key] = -1 if any(getattr(t, key, -1) < 0 for t in ran) or not ran else out[key]
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
            f"{get('prefetch_named'):,} named, {get('prefetch_routed'):,} routed{_over(get, tokens)}); read ahead "
            f"{get('prefetch_bytes') / mib / tokens:.2f} MiB/token, of it unused by its layer "
            f"{get('prefetch_unused_bytes') / mib / tokens:.2f}, evicted never used "
            f"{get('prefetch_never_used_bytes') / mib / tokens:.2f}, a later token's hit {get('prefetch_late_bytes') / mib / tokens:.2f} "
            f"({get('prefetch_idle_bytes') / mib:.2f} MiB still "
            f"unused at the end); dropped {get('prefetch_dropped'):,}")


def _over(get: Any, tokens: int) -> str:
    """Which layers precision and recall are over, and what was skipped for the host ("" before counted)."""
    layers, skipped = get("prefetch_layers"), get("prefetch_skipped_layers")
    if layers is None or layers < 0 or skipped is None or skipped < 0:
        return ""
    said = f" over the {layers:,} layers staged for"
    if not skipped:
        return said
    return (f"{said}; {skipped:,} layers run on the host skipped: {get('prefetch_skipped_named'):,} named there, "
            f"{get('prefetch_skipped_bytes') / 2**20 / tokens:.2f} MiB/token of them not cached, not read")
