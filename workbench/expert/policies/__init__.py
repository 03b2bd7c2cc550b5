"""Per-layer expert caches of N experts and their eviction policies, and a fast simulator over a trace.

What ``cache-experts N`` means: every MoE layer has its own cache of N experts (an expert is all of its
layer's blobs' slices of that id: gate, up and down together). A token's ``k`` routed experts of a layer
are looked up in the trace's order, all ``k`` pinned while that token is served in that layer: a miss
loads the expert, evicting (once N are resident) a resident expert *not* routed to this token, chosen by
the policy. The hit rate is hits over lookups; every cache starts empty.

Policies (``--policy NAME``; :func:`parse_policy`):

* ``lru``, ``fifo`` — least recently used / first loaded leaves first.
* ``lfu`` (``lfu:W``) — the fewest uses since loaded leaves first (ties: least recently used); every
  ``W`` tokens (default :data:`LFU_AGE_TOKENS`) each layer's counts are halved, so old popularity fades.
* ``arc`` — Megiddo and Modha's adaptive replacement cache (recency and frequency lists with ghosts).
* ``static`` — Fiddler's offline placement: the N most used experts of each layer over the trace
  (ties: the lower id) are kept once loaded and never evicted; any other expert is read for its token
  and dropped (it bypasses the cache), so static is the one policy Belady's bound does not cover.
* ``belady`` — the offline optimum (MIN): evict the expert whose next use lies farthest ahead.

Modules: :mod:`.names` (the names, ``lfu:W``), :mod:`.layer` (each policy as a plain class: what a
session's cache runs), :mod:`.offline` (what static and belady know ahead: next uses, the most routed
experts), :mod:`.kernels` and :mod:`.arc_kernel` (the same rules for the simulator, vectorized over
(cache size, layer) rows, or a tight loop for ARC), :mod:`.simulate` (``workbench trace simulate``: results,
their fraction of Belady's, the plain-class reference), :mod:`.partition` (``session --cache-experts N``:
the session cache's per-layer eviction over its (blob, expert) slices, and the byte figure N maps to).
"""
from workbench.expert.policies.names import LAYER_POLICIES, LFU_AGE_TOKENS, PolicySpec, parse_policy

__all__ = ["LAYER_POLICIES", "LFU_AGE_TOKENS", "PolicySpec", "parse_policy"]
