"""``--prefetch``: what a session stages ahead of a layer while the layer before it computes.

``NAME[:key=value,...]``:

* ``route`` (the default) — the next layer's own routing, known ahead: the write-up's route-ahead, a
  perfect predictor, what ``--overlap`` has always read ahead;
* ``none`` — nothing: a layer's misses are read once it is routed;
* ``previous`` — the previous token's experts for this layer;
* ``popularity[:n=N,from=seen|trace]`` — the N (default k) most routed experts of this layer: so far
  in the session (``seen``, the default), or over the whole trace profiled ahead (``trace``, as an
  offline profile of a calibration set is);
* ``oracle[:precision=P,recall=R,seed=S]`` — the routing degraded: each routed expert named with
  probability R, each other one with the probability that makes the expected precision P (both 1 by
  default: ``oracle`` alone is ``route`` through the predictor's path). Seeded (default: ``--seed``).

Anything but ``route`` and ``none`` stages ahead only with ``--overlap`` (the previous layer's compute
is what hides the reads).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from workbench.errors import ParamError

PREFETCHERS = ("route", "none", "previous", "popularity", "oracle")
_PARAMS: Mapping[str, Mapping[str, type]] = {
    "route": {}, "none": {}, "previous": {}, "popularity": {"n": int, "from": str},
    "oracle": {"precision": float, "recall": float, "seed": int},
}
POPULARITY_FROM = ("seen", "trace")


@dataclass(frozen=True)
class PrefetchSpec:
    """A parsed ``--prefetch``: the predictor's name and its parameters (only those given)."""

    name: str
    params: tuple[tuple[str, object], ...] = ()

    def get(self, key: str, default: object = None) -> object:
        return dict(self.params).get(key, default)

    @property
    def predicts(self) -> bool:
        """Whether a predictor names what is staged (everything but ``route``, the routing itself)."""
        return self.name != "route"


def parse_prefetch(text: str) -> PrefetchSpec:
    """``oracle:precision=0.9,recall=0.8`` → ``PrefetchSpec("oracle", ...)``; a ParamError names what is wrong."""
    name, _, rest = str(text).strip().partition(":")
    if name not in PREFETCHERS:
        raise ParamError("session", "prefetch", f"{text!r}: {name!r} is not one of {', '.join(PREFETCHERS)}")
    params: dict[str, object] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        kind = _PARAMS[name].get(key.strip())
        if not sep or kind is None:
            known = ", ".join(_PARAMS[name]) or "none"
            raise ParamError("session", "prefetch", f"{text!r}: {part!r} is not key=value with a key of {name} "
                                                    f"(known: {known})")
        try:
            params[key.strip()] = kind(value.strip())
        except ValueError:
            raise ParamError("session", "prefetch", f"{text!r}: {key}={value!r}: expected {kind.__name__}") from None
    _check(text, name, params)
    return PrefetchSpec(name, tuple(sorted(params.items())))


def _check(text: str, name: str, params: dict[str, object]) -> None:
    for key in ("precision", "recall"):
        value = params.get(key)
        if value is not None and not (0.0 < value <= 1.0 if key == "precision" else 0.0 <= value <= 1.0):
            bound = "(0, 1]" if key == "precision" else "[0, 1]"
            raise ParamError("session", "prefetch", f"{text!r}: {key} must be in {bound}, got {value}")
    if "n" in params and params["n"] < 1:  # type: ignore[operator]
        raise ParamError("session", "prefetch", f"{text!r}: n must be >= 1, got {params['n']}")
    if params.get("from", "seen") not in POPULARITY_FROM:
        raise ParamError("session", "prefetch", f"{text!r}: from must be one of {', '.join(POPULARITY_FROM)}")


def check_prefetch(text: str, overlap: bool) -> PrefetchSpec:
    """The spec, or one line when it cannot run with these settings (a predictor without ``overlap``)."""
    spec = parse_prefetch(text)
    if spec.name not in ("route", "none") and not overlap:
        raise ParamError("session", "prefetch", f"{text!r} stages the next layer while this one computes: it needs "
                                                "--overlap")
    return spec
