"""The per-layer policies as plain classes: one instance is one layer's cache of ``capacity`` experts.

Written for reading, not speed (a session's cache calls them a few thousand times a turn; the
simulator, :mod:`.simulate`, runs the same rules vectorized): a driver calls :meth:`start_token` at each
token, then :meth:`access` once per routed expert in the trace's order, passing the experts it must not
evict (the token's own ``k``, and any the session still has in flight); ``access`` returns the experts it
evicted, and afterwards the expert is resident unless the policy bypasses it (``static``)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Container, Iterable

import numpy as np

from workbench.expert.policies.names import PolicySpec
from workbench.expert.policies.offline import NEVER, hot_experts, next_use


class _Scored:
    """Resident experts under a score; the lowest-scored one not pinned leaves first."""

    name = ""

    def __init__(self, capacity: int, seq: np.ndarray):
        self.capacity, self.seq, self.k = capacity, seq, seq.shape[1]
        self.resident: dict[int, tuple] = {}
        self.pos = -1  # the flat position t * k + j of the access being served

    def start_token(self, t: int) -> None:
        self.pos = t * self.k - 1

    def __contains__(self, expert: int) -> bool:
        return expert in self.resident

    def access(self, expert: int, pinned: Container[int]) -> list[int]:
        self.pos += 1
        if expert in self.resident:
            self.resident[expert] = self._on_hit(expert)
            return []
        out = []
        while len(self.resident) >= self.capacity:
            victim = min((e for e in self.resident if e not in pinned), key=self.resident.__getitem__, default=None)
            if victim is None:
                raise LookupError(f"every resident expert is pinned (capacity {self.capacity})")
            del self.resident[victim]
            out.append(victim)
        self.resident[expert] = self._on_load(expert)
        return out

    def _on_hit(self, expert: int) -> tuple:
        return self.resident[expert]

    def _on_load(self, expert: int) -> tuple:
        return (self.pos,)


class LruLayer(_Scored):
    name = "lru"

    def _on_hit(self, expert: int) -> tuple:
        return (self.pos,)


class FifoLayer(_Scored):
    name = "fifo"


class LfuLayer(_Scored):
    """Fewest uses since loaded leaves first, ties to the least recently used; counts halve every
    ``age_tokens`` tokens (at the start of tokens ``W, 2W, ...``)."""

    name = "lfu"

    def __init__(self, capacity: int, seq: np.ndarray, age_tokens: int):
        super().__init__(capacity, seq)
        self.age_tokens = age_tokens

    def start_token(self, t: int) -> None:
        super().start_token(t)
        if t and t % self.age_tokens == 0:
            self.resident = {e: (uses // 2, last) for e, (uses, last) in self.resident.items()}

    def _on_hit(self, expert: int) -> tuple:
        return (self.resident[expert][0] + 1, self.pos)

    def _on_load(self, expert: int) -> tuple:
        return (1, self.pos)


class BeladyLayer(_Scored):
    """Belady's MIN: the resident expert used next farthest ahead leaves first (never again: farthest)."""

    name = "belady"

    def __init__(self, capacity: int, seq: np.ndarray):
        super().__init__(capacity, seq)
        self._next = next_use(seq).ravel()

    def _on_hit(self, expert: int) -> tuple:
        return (-int(self._next[self.pos]),)

    _on_load = _on_hit


class StaticLayer:
    """Fiddler's placement: the ``capacity`` most used experts of the layer (over ``seq``) stay once
    loaded; any other expert is served and not kept."""

    name = "static"

    def __init__(self, capacity: int, seq: np.ndarray, n_experts: int):
        self.hot = set(np.flatnonzero(hot_experts(seq, n_experts, capacity)[0]).tolist())
        self.resident: set[int] = set()

    def start_token(self, t: int) -> None:
        return None

    def __contains__(self, expert: int) -> bool:
        return expert in self.resident

    def access(self, expert: int, pinned: Container[int]) -> list[int]:
        if expert in self.hot:
            self.resident.add(expert)
        return []


class ArcLayer:
    """ARC (Megiddo and Modha, FAST 2003), its four lists in LRU → MRU order, with one change: the entry
    REPLACE takes is the least recent one of its list that is not pinned (the other list's when its list
    has none)."""

    name = "arc"

    def __init__(self, capacity: int, seq: np.ndarray):
        self.c, self.p = capacity, 0.0
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def start_token(self, t: int) -> None:
        return None

    def __contains__(self, expert: int) -> bool:
        return expert in self.t1 or expert in self.t2

    def access(self, x: int, pinned: Container[int]) -> list[int]:
        c, out = self.c, []
        if x in self.t1 or x in self.t2:
            (self.t1 if x in self.t1 else self.t2).pop(x)
            self.t2[x] = None
            return out
        if x in self.b1 or x in self.b2:
            in_b2 = x in self.b2
            if in_b2:
                self.p = max(0.0, self.p - max(len(self.b1) / len(self.b2), 1.0))
            else:
                self.p = min(float(c), self.p + max(len(self.b2) / len(self.b1), 1.0))
            out.append(self._replace(in_b2, pinned))
            (self.b2 if in_b2 else self.b1).pop(x)
            self.t2[x] = None
            return out
        if len(self.t1) + len(self.b1) == c:
            if len(self.t1) < c:
                self.b1.popitem(last=False)
                out.append(self._replace(False, pinned))
            else:
                victim = _oldest(self.t1, pinned)
                self.t1.pop(victim)
                out.append(victim)
        elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= c:
            if len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) == 2 * c:
                self.b2.popitem(last=False)
            out.append(self._replace(False, pinned))
        self.t1[x] = None
        return out

    def _replace(self, in_b2: bool, pinned: Container[int]) -> int:
        n1 = len(self.t1)
        from_t1 = n1 >= 1 and ((in_b2 and n1 == self.p) or n1 > self.p)
        first, ghost = (self.t1, self.b1) if from_t1 else (self.t2, self.b2)
        victim = _oldest(first, pinned, missing=True)
        if victim is None:  # every entry of that list is pinned: the other list gives one
            first, ghost = (self.t2, self.b2) if from_t1 else (self.t1, self.b1)
            victim = _oldest(first, pinned)
        first.pop(victim)
        ghost[victim] = None
        return victim


def _oldest(entries: Iterable[int], pinned: Container[int], missing: bool = False) -> int | None:
    victim = next((e for e in entries if e not in pinned), None)
    if victim is None and not missing:
        raise LookupError("every resident expert is pinned")
    return victim


def make_layer_policy(spec: PolicySpec, capacity: int, seq: np.ndarray, n_experts: int):
    """One layer's cache of ``capacity`` experts under ``spec``, over that layer's ``(tokens, k)`` routing."""
    seq = np.asarray(seq)
    if spec.name == "lfu":
        return LfuLayer(capacity, seq, spec.age_tokens)
    if spec.name == "static":
        return StaticLayer(capacity, seq, n_experts)
    return {"lru": LruLayer, "fifo": FifoLayer, "belady": BeladyLayer, "arc": ArcLayer}[spec.name](capacity, seq)
