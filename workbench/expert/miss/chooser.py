"""``--miss auto`` token by token: which way each token runs, its layers' seconds summed, the probes counted.

:class:`TokenChooser` holds what :func:`~workbench.expert.miss.rule.next_way` decides from: each way's
running cost per token and the way in use. The miss server asks :meth:`TokenChooser.way` as each
(token, layer) is planned and reports each layer's wall (landing, device compute, host compute) with
:meth:`TokenChooser.layer_done`; a token is priced when its last layer is done.

* A token's way is picked when its first layer is planned. With overlap that is before the token
  before it ends, so a token begun and not yet priced counts in the warm-up's turns, and no probe begins
  while another is unpriced: the token after a probe runs the way the probe's layers so far show
  (priced as a whole token of them).
* A probe goes back to the other way for the rest of its layers once the layers it ran cost
  :attr:`~workbench.expert.miss.rule.AutoRule.cutoff` times the other way's token, that cost as it
  stands at each layer (the warm-up's first probe begins before the first token is priced).
* A token's cost is the sum of the layers it ran its way; a probe cut short is priced by its layers so
  far scaled to the whole token (as many layers again cost as much again): the cut already showed it the
  dearer way.
"""
from __future__ import annotations

from dataclasses import dataclass

from workbench.expert.miss.rule import ArmCost, AutoRule, next_way, settle, warmed


def _other(way: str) -> str:
    return "host" if way == "fetch" else "fetch"


@dataclass
class _Token:
    way: str
    probe: bool  # not the way in use as it began
    wall: float = 0.0  # seconds of the layers run ``way``
    layers: int = 0
    cut: bool = False


class TokenChooser:
    """The ways of ``layers``-layer tokens by ``rule`` (see the module docstring)."""

    def __init__(self, layers: int, rule: AutoRule = AutoRule()):
        self.layers, self.rule = max(1, layers), rule
        self.costs = {"fetch": ArmCost(), "host": ArmCost()}
        self.current = "fetch"  # the way in use
        self.since_probe = 0  # tokens the way in use ran since the last probe
        self.probe_tokens = 0  # tokens begun as probes (the turn's: take_probes)
        self.probe_s = 0.0  # seconds of their layers run the probed way
        self._tokens: dict[int, _Token] = {}

    def way(self, t: int) -> str:
        """The way token ``t``'s next layer runs."""
        tok = self._tokens.get(t) or self._begin(t)
        yardstick = self.costs[_other(tok.way)].seconds  # as it stands now: a token begun before it was priced
        if tok.probe and not tok.cut and yardstick is not None and tok.wall > self.rule.cutoff * yardstick:
            tok.cut = True  # it cannot be the cheaper way any more: the rest of the token goes back
        return _other(tok.way) if tok.cut else tok.way

    def _begin(self, t: int) -> _Token:
        f, h = self.costs["fetch"], self.costs["host"]
        pending = [tok.way for tok in self._tokens.values()]  # with overlap a token begins before the last ends
        way = next_way(f, h, self.current, self.since_probe, self.layers, self.rule,
                       pending.count("fetch"), pending.count("host"))
        unpriced = [tok for tok in self._tokens.values() if tok.probe]
        current = self._provisional(unpriced[0]) if unpriced else self.current
        if unpriced:
            way = current  # never a probe while another is unpriced: the way it shows so far
        probe = way != current
        self.since_probe = 0 if probe else self.since_probe + 1
        tok = self._tokens[t] = _Token(way, probe)
        return tok

    def _provisional(self, probe: _Token) -> str:
        """The way in use were ``probe`` priced now by its layers so far (a whole token of them): the token
        after a probe begins while the probe's last layer runs, and waiting for it would cost a token."""
        if not probe.layers or probe.cut:
            return self.current
        trial = {way: ArmCost(c.seconds, c.samples, c.recent.copy()) for way, c in self.costs.items()}
        trial[probe.way].add(probe.wall * self.layers / probe.layers)
        return settle(trial["fetch"], trial["host"], self.current, self.rule) if warmed(
            trial["fetch"], trial["host"], self.rule) else self.current

    def layer_done(self, t: int, way: str, wall_s: float, last: bool) -> None:
        """A layer of token ``t`` ran ``way`` in ``wall_s``; ``last``: the token's last layer (it is priced)."""
        tok = self._tokens.get(t)
        if tok is None:
            return
        if way == tok.way:
            tok.wall += wall_s
            tok.layers += 1
        if not last:
            return
        del self._tokens[t]
        if tok.layers:
            self.costs[tok.way].add(tok.wall * self.layers / tok.layers)
        if tok.probe:
            self.probe_tokens += 1
            self.probe_s += tok.wall
        self.current = settle(self.costs["fetch"], self.costs["host"], self.current, self.rule)

    def take_probes(self) -> tuple[int, float]:
        """The probes' tokens and seconds since the last call."""
        done = self.probe_tokens, self.probe_s
        self.probe_tokens, self.probe_s = 0, 0.0
        return done

    def reset(self) -> None:
        """Forget tokens begun and not finished (a turn that failed midway)."""
        self._tokens.clear()

    def describe(self) -> str:
        r = self.rule
        return (f"auto (whole tokens one way or the other, by the median of each way's tokens timed in the "
                f"session: each tried first ({r.warmup} tokens, or one where one way is {r.decisive:g}x the "
                f"other), then the cheaper, changed only for one {r.hysteresis:.0%} cheaper; the other probed, "
                f"a probe going back past {r.cutoff:g}x a token, spaced within {r.probe_share:.0%} of the "
                f"tokens' time")
