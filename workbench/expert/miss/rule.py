"""``--miss auto``'s rule: the way whose whole token is cheaper, by tokens timed each way in the session.

What a user pays for is the token, not the miss: a fetched miss also fills the cache, and every hit it
buys is landed and multiplied on the device each layer; a host product slows several-fold while the lanes
read next to it (the 2-core VM: 0.4–0.5 ms a bf16 expert against 0.04–0.06 idle). A per-miss price
measured in a mixed regime priced neither, and landed at ~0.6 of the host on a checkpoint where the host
was 3× fetch. So auto runs **whole tokens** one way — ``fetch`` (every miss fetched, hits landed: what
``--miss fetch`` does) or ``host`` (every routed expert computed on the host, hits too: what ``--miss
host`` does once its cache is empty) — and prices each way by its tokens' wall (the layers' landing,
device compute and host compute; :class:`~workbench.expert.miss.chooser.TokenChooser` sums them).

:func:`next_way` is the rule, a pure function of the two costs (each the median of its last
:data:`WINDOW` tokens) and the way in use:

* **warm-up** — tokens alternate (fetch first) until each way has :attr:`AutoRule.warmup` tokens, or one
  token each when one way costs :attr:`AutoRule.decisive` times the other (no close call to settle);
* **exploit** — every token the way in use (:func:`settle`: it changes only when the other's median is
  :attr:`AutoRule.hysteresis` cheaper, so two costs that stand still cannot flip it back and forth), but
  for a **probe** of the other way, so its cost stays measured (a page cache gone cold, a busier device);
* a probe token **goes back** to the way in use once its layers have cost :attr:`AutoRule.cutoff` times
  that way's token (it cannot win any more), so a probe costs at most about that much plus two of its
  layers; probes are spaced (:func:`probe_gap`) so their extra seconds stay within
  :attr:`AutoRule.probe_share` of the tokens' time, and never closer than :attr:`AutoRule.min_gap` tokens.
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

WINDOW = 7  # tokens a running cost is the median of
WAYS = ("fetch", "host")


@dataclass
class ArmCost:
    """One way's running cost: seconds per token (None until measured), the median of the last
    :data:`WINDOW` of ``samples`` tokens."""

    seconds: float | None = None
    samples: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, seconds_per_token: float) -> None:
        self.recent.append(max(0.0, float(seconds_per_token)))
        self.seconds = statistics.median(self.recent)
        self.samples += 1


@dataclass(frozen=True)
class AutoRule:
    warmup: int = 2  # tokens measured each way before a close call is decided
    decisive: float = 2.0  # ... but one each where one way's token costs this many times the other's
    hysteresis: float = 0.03  # the way in use changes only for one this much cheaper (by the medians)
    cutoff: float = 1.25  # a probe token goes back once its layers cost this many of the way in use's token
    probe_share: float = 0.02  # the most of the tokens' time probes' extra seconds may take (0: never probe)
    min_gap: int = 16  # tokens the way in use runs between two probes, at least


def warmed(fetch: ArmCost, host: ArmCost, rule: AutoRule) -> bool:
    """Both ways measured enough to decide."""
    if fetch.seconds is None or host.seconds is None:
        return False
    if fetch.samples >= rule.warmup and host.samples >= rule.warmup:
        return True
    cheap, dear = sorted((fetch.seconds, host.seconds))
    return dear >= rule.decisive * max(cheap, 1e-12)


def settle(fetch: ArmCost, host: ArmCost, current: str, rule: AutoRule) -> str:
    """The way in use after a new token's cost: the other only where its median is ``hysteresis`` cheaper."""
    if fetch.seconds is None or host.seconds is None:
        return current
    costs = {"fetch": fetch.seconds, "host": host.seconds}
    other = "host" if current == "fetch" else "fetch"
    return other if costs[other] < costs[current] * (1.0 - rule.hysteresis) else current


def probe_gap(cheap: float, dear: float, layers: int, rule: AutoRule) -> float:
    """Tokens the way in use (``cheap`` s a token) runs between two probes of the other (``dear``), so the
    probes' extra seconds stay within ``probe_share`` (inf: never). A probe's extra is at most what its
    layers run the probed way cost — ``cutoff`` of a cheap token plus two dear layers (the one that crossed
    it and the one planned ahead) — since the rest of it runs the cheap way; never more than a dear token's
    extra."""
    if rule.probe_share <= 0:
        return float("inf")
    extra = max(0.0, min(dear - cheap, rule.cutoff * cheap + 2.0 * dear / max(1, layers)))
    return max(float(rule.min_gap), extra / max(cheap, 1e-12) / rule.probe_share)


def next_way(fetch: ArmCost, host: ArmCost, current: str, since_probe: int, layers: int,
             rule: AutoRule = AutoRule(), fetch_pending: int = 0, host_pending: int = 0) -> str:
    """``"fetch"`` or ``"host"`` for the next token, ``since_probe`` tokens after the last probe; a way other
    than ``current`` is a probe (the caller cuts it at :attr:`AutoRule.cutoff`). In the warm-up, the way
    with fewer tokens, counting those begun and not yet priced (``*_pending``)."""
    if not warmed(fetch, host, rule):
        return "fetch" if fetch.samples + fetch_pending <= host.samples + host_pending else "host"
    costs = {"fetch": fetch.seconds, "host": host.seconds}
    other = "host" if current == "fetch" else "fetch"
    gap = probe_gap(costs[current], costs[other], layers, rule)  # type: ignore[arg-type]
    return other if since_probe >= gap else current
