"""``--miss auto``'s rule: serve a miss the cheaper way, by costs measured in the session itself.

Two costs per expert, each the median of its last :data:`WINDOW` measurements (one preempted layer on a
loaded machine must not decide a session: a mean let one 1 ms outlier send every miss the dearer way)
learned as the session decodes (:class:`~workbench.expert.miss.server.MissServer` feeds them once a layer is done):

* ``fetch`` — what a fetched miss cost the decode thread: the layer's read wait and the cache's
  bookkeeping shared over its fetched misses, plus its upload and device compute shared over every
  expert landed on the device (a fetched miss pays both; a hit only the second);
* ``host`` — the layer's host compute shared over the experts computed on the host.

:func:`choose` is the rule, a pure function of the two costs and the misses since the last probe: each
way is tried on :attr:`AutoRule.warmup` layers first (fetch, then host: the server sends one miss a
layer there while it learns), then every miss goes the
cheaper way except a probe of the dearer way, so its cost stays measured (a page cache gone cold, a
busier device), spaced so probes cost at most :attr:`AutoRule.probe_share` of the misses' time: one
miss in ``dearer / cheaper / probe_share`` (2 % and a 20× dearer way: one in 1,000; 1.1×: one in 55).
The rule is myopic: a fetched miss also fills the cache for later
tokens, which it does not price (on traffic with reuse, ``fetch`` can beat ``auto``; the A/B says).
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

WINDOW = 7  # layers a running cost is the median of


@dataclass
class ArmCost:
    """One way's running cost: seconds per expert (None until measured), the median of the last
    :data:`WINDOW` of ``samples`` layers."""

    seconds: float | None = None
    samples: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, seconds_per_expert: float) -> None:
        self.recent.append(max(0.0, float(seconds_per_expert)))
        self.seconds = statistics.median(self.recent)
        self.samples += 1


@dataclass(frozen=True)
class AutoRule:
    warmup: int = 3  # layers measured each way before the costs decide (a median of 3 outlasts one outlier)
    probe_share: float = 0.02  # the most of the misses' time probes of the dearer way may take (0: never probe)


def probe_gap(fetch: float, host: float, rule: AutoRule) -> float:
    """Misses the cheaper way between two probes of the dearer way (inf: never)."""
    cheap, dear = min(fetch, host), max(fetch, host)
    if rule.probe_share <= 0:
        return float("inf")
    return dear / max(cheap, 1e-12) / rule.probe_share


def choose(fetch: ArmCost, host: ArmCost, since_probe: int, rule: AutoRule = AutoRule()) -> str:
    """``"fetch"`` or ``"host"`` for the next miss, ``since_probe`` misses after the last that went the
    dearer way (the caller counts them)."""
    if fetch.samples < rule.warmup or fetch.seconds is None:
        return "fetch"
    if host.samples < rule.warmup or host.seconds is None:
        return "host"
    best, other = ("host", "fetch") if host.seconds < fetch.seconds else ("fetch", "host")
    return other if since_probe >= probe_gap(fetch.seconds, host.seconds, rule) else best
