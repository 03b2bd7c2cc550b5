"""How much a session may be asked for: every number of a :class:`SessionConfig` inside a range a real
session stays far inside, and what the model makes of them, checked before anything is recorded.

``session --turns 1000000000`` or ``--experts-per-token 1000000000`` used to pass the parent's checks,
record an attempt, and fail in the worker (issue 35 §5): the synthetic trace is turns × tokens × layers
× k routing entries made up front, and k cannot exceed a layer's experts. The same bounds hold for the
CLI's options (workbench/cli/numbers.py spells them out: ``--help`` loads no numpy), ``--ab`` arms and
the notebooks, since all of them build a SessionConfig.
"""
from __future__ import annotations

import math
from typing import Any

from workbench.errors import ParamError

MAX_TURNS = 100_000  # turns of a session, and tokens of a turn
MAX_THREADS = 1_024  # lanes, upload threads
MAX_EXPERTS = 4_096  # experts routed per token (the largest public MoE models route over 384)
MAX_MIB = float(2**30)  # a cache or memory limit in MiB: 1 PiB
MAX_SEED = 2**63 - 1
MAX_TRACE_CELLS = 2**28  # routing entries of a synthetic trace (int32: 1 GiB; a 200-turn session: ~10⁷)

_COUNTS = {"turns": (1, MAX_TURNS), "tokens": (1, MAX_TURNS), "lanes": (1, MAX_THREADS),
           "upload_threads": (1, MAX_THREADS), "steady_window": (2, MAX_TURNS), "seed": (0, MAX_SEED)}
_AMOUNTS = {"cache_mib": MAX_MIB, "memory_limit_mib": MAX_MIB, "steady_slope_pct": 1000.0, "zipf_s": 1000.0}


def check_bounds(config: Any) -> None:
    """ParamError (one line) for a number of ``config`` outside its range, or a float that is not finite."""
    for name, (low, high) in _COUNTS.items():
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ParamError("session", name, f"must be an integer in [{low}, {high:,}], got {value!r}")
    k = config.experts_per_token
    if k is not None and (not isinstance(k, int) or not 1 <= k <= MAX_EXPERTS):
        raise ParamError("session", "experts_per_token", f"must be an integer in [1, {MAX_EXPERTS:,}], got {k!r}")
    for name, high in _AMOUNTS.items():
        value = getattr(config, name)
        if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)
                                  or not 0 < value <= high):
            raise ParamError("session", name, f"must be a finite number in (0, {high:,g}], got {value!r}")
    if config.gate is not None and (not isinstance(config.gate, (int, float)) or not 0.0 <= config.gate <= 1.0):
        raise ParamError("session", "gate", f"must be a resident fraction in [0, 1], got {config.gate!r}")


def check_for_model(config: Any, layers: int, n_experts: int, default_k: int) -> None:
    """ParamError (one line) for what this model cannot make of ``config``: more experts per token than
    a layer has, or a synthetic trace of more than :data:`MAX_TRACE_CELLS` entries."""
    k = config.experts_per_token
    if k is not None and k > n_experts:
        raise ParamError("session", "experts_per_token", f"{k:,} but the model's layers have {n_experts} experts")
    if config.trace is None:
        cells = config.turns * config.tokens * layers * (default_k if k is None else k)
        if cells > MAX_TRACE_CELLS:
            raise ParamError("session", "turns", f"{config.turns:,} turns × {config.tokens:,} tokens × {layers} "
                             f"layers × {default_k if k is None else k} experts are {cells:,} routing entries: "
                             f"more than the {MAX_TRACE_CELLS:,} a synthetic trace may hold")
