"""A session's expert cache split into per-layer caches of N experts (``session --cache-experts N``).

The :class:`~workbench.expert.cache.ExpertCache` stages slices, (blob, expert); a layer's expert is
one slice in each of the layer's blobs (gate, up, down). :class:`PerLayerEviction` is the policy the
cache runs then: it maps slices to (layer, expert) units, tells each layer's policy
(:mod:`.layer`) about an access once per unit — when the layer's first blob's slice is looked up,
which the decode loop does before its other blobs' — and hands back whole units to evict. The
token's own ``k`` experts of the layer are pinned (read off the routing the session replays), so a
slice-at-a-time loop evicts what the simulator evicts. An expert a policy does not keep (``static``'s
cold ones) is read for its token and dropped as soon as the token lets go of it.

Bytes: the cache's budget is reported as N experts of every layer (each expert: its largest slice
per blob); the count, not the bytes, decides eviction, and page accounting (boundary pages, release)
is the cache's as ever. ``static`` holds up to ``k`` passing experts per layer beyond N while served.
"""
from __future__ import annotations

from typing import Container, Hashable, Mapping, Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.expert.policies.layer import make_layer_policy
from workbench.expert.policies.names import PolicySpec
from workbench.expert.routing import RoutingTrace
from workbench.formats.index import ExpertBlob


def unit_bytes(blobs: Sequence[ExpertBlob]) -> int:
    """One expert of a layer: its largest slice in each of the layer's blobs."""
    return sum(max(n for _, n in b.slices) for b in blobs)


class PerLayerEviction:
    """The eviction of per-layer caches of ``capacity`` experts over ``blobs`` replaying ``trace`` for ``tokens``."""

    def __init__(self, blobs: Sequence[ExpertBlob], spec: PolicySpec, capacity: int, trace: RoutingTrace, tokens: int):
        if not trace.k <= capacity <= trace.n_experts:
            raise ParamError("session", "cache_experts", f"{capacity} experts per layer: must be in [{trace.k}, "
                                                         f"{trace.n_experts}] (a token routes {trace.k} per layer)")
        self.name = f"{spec} per layer ({capacity} experts)"
        self.capacity, self.k = capacity, trace.k
        self._layer = [b.layer for b in blobs]
        by_layer: dict[int, list[int]] = {}
        for i, b in enumerate(blobs):
            by_layer.setdefault(b.layer, []).append(i)
        self._lead = {layer: ids[0] for layer, ids in by_layer.items()}
        self.budget_bytes = sum(capacity * unit_bytes([blobs[i] for i in ids]) for ids in by_layer.values())
        # the routing the session replays (a trace shorter than the session repeats from the start)
        self._seq = np.asarray(trace.experts[np.arange(tokens) % trace.tokens])
        self._row = {layer: i for i, layer in enumerate(trace.layers)}
        self._policies = {layer: make_layer_policy(spec, capacity, self._seq[:, i, :], trace.n_experts)
                          for layer, i in self._row.items()}
        self._accesses = dict.fromkeys(self._row, 0)
        self._slices: dict[tuple[int, int], set[Hashable]] = {}  # live unit → its live slices

    def _unit(self, key) -> tuple[int, int]:
        return self._layer[key.blob], key.expert

    def _access(self, key, pins: Mapping[Hashable, int]) -> list[int]:
        layer, expert = self._unit(key)
        n, row = self._accesses[layer], self._row[layer]
        t, j = divmod(n, self.k)
        if t >= len(self._seq) or self._seq[t, row, j] != expert:
            raise ParamError("session", "cache_experts", f"layer {layer} looked up expert {expert} where the routing "
                             "has another: per-layer caches follow the trace in order (a predictor's prefetch cannot)")
        policy = self._policies[layer]
        if j == 0:
            policy.start_token(t)
        self._accesses[layer] = n + 1
        pinned = set(self._seq[t, row].tolist()) | {k.expert for k in pins if self._layer[k.blob] == layer}
        return policy.access(expert, pinned)

    # --- what ExpertCache calls --------------------------------------------------------------------
    def make_room(self, key, pins: Mapping[Hashable, int]) -> list[Hashable]:
        """Before ``key`` is admitted: the live slices of the units its layer's policy evicts for it."""
        if key.blob != self._lead[self._layer[key.blob]]:
            return []  # the unit's room was made when its first slice came in
        out: list[Hashable] = []
        for expert in self._access(key, pins):
            out += sorted(self._slices.get((self._layer[key.blob], expert), ()))
        return out

    def admit(self, key: Hashable) -> None:
        self._slices.setdefault(self._unit(key), set()).add(key)

    def touch(self, key: Hashable) -> None:
        if key.blob == self._lead[self._layer[key.blob]]:
            layer, expert = self._unit(key)
            if expert not in self._policies[layer] or self._access(key, {}):
                raise ParamError("session", "cache_experts", f"layer {layer} expert {expert} hit in the cache but "
                                 "not in its policy's: the cache and its per-layer policy disagree")

    def forget(self, key: Hashable) -> None:
        unit = self._unit(key)
        live = self._slices[unit]
        live.discard(key)
        if not live:
            del self._slices[unit]

    def passing(self, key: Hashable) -> bool:
        """Whether an entry nobody uses any more is to be dropped now (its policy did not keep it)."""
        layer, expert = self._unit(key)
        return expert not in self._policies[layer]

    def victim(self, exclude: Container[Hashable] = ()) -> Hashable:
        raise LookupError("per-layer caches evict by count (make_room), never for bytes")


def check_session_policy(config) -> None:
    """One ParamError line for a session's (a SessionConfig's) policy options that cannot run together."""
    from workbench.expert.policies.names import parse_policy

    policy, cache_experts, cache_mib = config.policy, config.cache_experts, config.cache_mib
    prefetch = getattr(config, "prefetch", "route")
    spec = parse_policy(policy, "session")
    if cache_experts is None:
        if spec.name not in ("lru", "fifo"):
            raise ParamError("session", "policy", f"{policy} runs per-layer caches: give --cache-experts N "
                                                  "(experts per layer); a byte budget (--cache-mib) takes lru or fifo")
        return
    if not isinstance(cache_experts, int) or cache_experts < 1:
        raise ParamError("session", "cache_experts", f"must be an integer >= 1, got {cache_experts!r}")
    if cache_mib is not None:
        raise ParamError("session", "cache_experts",
                         "give --cache-experts (per layer) or --cache-mib (bytes), not both")
    if str(prefetch).partition(":")[0] not in ("route", "none"):
        raise ParamError("session", "cache_experts", f"--prefetch {prefetch} stages experts the trace does not route "
                         "there; per-layer caches follow the trace in order (use --prefetch route or none)")


def session_eviction(blobs: Sequence[ExpertBlob], trace: RoutingTrace, policy: str, cache_experts: int | None,
                     tokens: int) -> tuple[str | PerLayerEviction, int | None]:
    """The policy a session's cache runs and, for per-layer caches, the bytes N experts a layer come to."""
    if cache_experts is None:
        return policy, None
    from workbench.expert.policies.names import parse_policy

    eviction = PerLayerEviction(blobs, parse_policy(policy, "session"), cache_experts, trace, tokens)
    return eviction, eviction.budget_bytes
