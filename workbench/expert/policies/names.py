"""The per-layer policies' names and their one parameter (``lfu:W``), checked in one place."""
from __future__ import annotations

from typing import NamedTuple

from workbench.errors import ParamError

LAYER_POLICIES = ("lru", "fifo", "lfu", "arc", "static", "belady")
LFU_AGE_TOKENS = 128  # lfu halves its counts every this many tokens unless told otherwise


class PolicySpec(NamedTuple):
    """A policy named on the command line: its name and, for ``lfu``, the aging period in tokens."""

    name: str
    age_tokens: int = 0

    def __str__(self) -> str:
        return f"lfu:{self.age_tokens}" if self.name == "lfu" and self.age_tokens != LFU_AGE_TOKENS else self.name


def parse_policy(text: str, where: str = "policy") -> PolicySpec:
    """``lru``, ``fifo``, ``lfu`` or ``lfu:W``, ``arc``, ``static``, ``belady``; one ParamError line otherwise."""
    name, _, arg = str(text).strip().partition(":")
    if name not in LAYER_POLICIES:
        raise ParamError(where, "policy", f"{text!r} is not one of {', '.join(LAYER_POLICIES)} "
                                          "(lfu:W ages every W tokens)")
    if name != "lfu":
        if arg:
            raise ParamError(where, "policy", f"{text!r}: only lfu takes a parameter (lfu:W)")
        return PolicySpec(name)
    if not arg:
        return PolicySpec(name, LFU_AGE_TOKENS)
    if not arg.isdigit() or int(arg) < 1:
        raise ParamError(where, "policy", f"{text!r}: W in lfu:W is the aging period in tokens, an integer >= 1")
    return PolicySpec(name, int(arg))
