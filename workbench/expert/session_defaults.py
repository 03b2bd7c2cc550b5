"""Defaults that make a session show something, and the one-line warnings when it cannot.

* ``k`` (experts per token): a quarter of the experts per layer, at most 8 — 2 of 8 as Mixtral, 8 of
  64 or 128 as the A3B models. Routing every expert every token (the old default on an 8-expert
  model) leaves an LRU cache nothing to hit unless it holds the whole model.
* the cache: half of the model's expert bytes, and never less than two tokens' working set (one
  token's routed experts over every MoE layer), so it can hit and still has to evict.

Warnings: a cache smaller than one token's working set can never hit under LRU or FIFO (a layer's
entries are evicted before the layer comes round again); a cache that holds every expert never
misses after the first token; a layout with no boundary pages cannot tell release on from off.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from workbench.formats.index import ExpertBlob

MiB = 1 << 20


def default_k(n_experts: int) -> int:
    """Experts routed per layer per token when nobody says: n/4, between 1 and 8."""
    return min(8, max(1, n_experts // 4))


def layer_bytes(blobs: Sequence[ExpertBlob], k: int) -> int:
    """One token's routed expert bytes in one layer of ``blobs`` (k of each blob's largest slices)."""
    return k * sum(max(n for _, n in b.slices) for b in blobs)


def working_set_bytes(by_layer: Mapping[int, Sequence[ExpertBlob]], k: int) -> int:
    """One token's routed expert bytes over every MoE layer."""
    return sum(layer_bytes(blobs, k) for blobs in by_layer.values())


def default_cache_bytes(expert_bytes: int, working_set: int) -> int:
    """Half the expert bytes, at least two tokens' working set, at most all of them."""
    return min(expert_bytes, max(2 * working_set, expert_bytes // 2))


def session_warnings(*, budget: int, working_set: int, expert_bytes: int, policy: str, leak_bound: int,
                     placement: str) -> tuple[str, ...]:
    """One line per setting that makes the session unable to show what it is usually run for."""
    out = []
    if budget < working_set and policy in ("lru", "fifo"):
        out.append(f"the cache ({budget / MiB:.1f} MiB) is smaller than one token's working set "
                   f"({working_set / MiB:.1f} MiB): with {policy} every entry is evicted before its layer comes "
                   "round again, so it can never hit")
    elif budget >= expert_bytes:
        out.append(f"the cache ({budget / MiB:.1f} MiB) holds every expert ({expert_bytes / MiB:.1f} MiB): after "
                   "the first token it never misses, so nothing is read and nothing evicted")
    if leak_bound == 0 and placement != "pool":  # a pool has no boundary release to set
        out.append(f"placement {placement} leaves no boundary pages in this file (every slot starts and ends on a "
                   "page): boundary release on and off cannot differ")
    return tuple(out)
