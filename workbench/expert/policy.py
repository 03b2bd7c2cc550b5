"""Eviction policies for the expert cache under a byte budget: a small protocol, LRU and FIFO, and a name →
class map. Per-layer caches of N experts (lfu, arc, static, Belady's bound too): :mod:`workbench.expert.policies`."""
from __future__ import annotations

from collections import OrderedDict
from typing import Container, Hashable, Protocol

from workbench.errors import ParamError


class EvictionPolicy(Protocol):
    """Decides which live entry leaves first. The cache calls ``admit`` once per staged entry,
    ``touch`` on every hit, ``victim`` when it needs room (the key stays live until ``forget``);
    ``victim`` never returns a key in ``exclude`` (entries a read or an upload is still using)."""

    name: str

    def admit(self, key: Hashable) -> None: ...

    def touch(self, key: Hashable) -> None: ...

    def victim(self, exclude: Container[Hashable] = ()) -> Hashable: ...

    def forget(self, key: Hashable) -> None: ...


class LruPolicy:
    """Least recently used leaves first."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[Hashable, None] = OrderedDict()

    def admit(self, key: Hashable) -> None:
        self._order[key] = None

    def touch(self, key: Hashable) -> None:
        self._order.move_to_end(key)

    def victim(self, exclude: Container[Hashable] = ()) -> Hashable:
        for key in self._order:
            if key not in exclude:
                return key
        raise LookupError("no live entry to evict" + (" that is not in use" if self._order else ""))

    def forget(self, key: Hashable) -> None:
        del self._order[key]


class FifoPolicy(LruPolicy):
    """First staged leaves first; hits do not reorder."""

    name = "fifo"

    def touch(self, key: Hashable) -> None:
        return None


POLICIES: dict[str, type] = {"lru": LruPolicy, "fifo": FifoPolicy}


def make_policy(policy: str | EvictionPolicy) -> EvictionPolicy:
    """A policy instance from its name, or the instance itself."""
    if not isinstance(policy, str):
        return policy
    if policy not in POLICIES:
        raise ParamError("cache", "policy", f"{policy!r} is not one of {', '.join(POLICIES)}")
    return POLICIES[policy]()
