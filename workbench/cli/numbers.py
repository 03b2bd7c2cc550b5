"""Every number a command takes is bounded at the command line, before anything is opened or recorded.

click's ``int`` takes any integer and its ``FloatRange`` lets ``nan`` through every bound (a comparison
with nan is false) and ``inf`` through an open upper end, so ``session --turns 1000000000`` or
``--experts-per-token 1000000000`` used to reach the worker and fail there after the attempt was
recorded (issue 35 §5). Here each kind of number has a range a real use stays far inside, and a float
must be finite; tests/test_cli_numbers.py walks every command's options and fails on any numeric option
not made here.
"""
from __future__ import annotations

import math
from typing import Any

import click

from workbench.measure.run import order

MAX_RUNS = MAX_ROUNDS = order.MAX_RUNS  # runs of one configuration, A/B rounds (the runner's own bound)
MAX_SECONDS = 7 * 24 * 3600.0  # a timeout: a week
MAX_THREADS = 1_024  # reader, lane or upload threads (the largest hosts have a few hundred cores)
MAX_TURNS = 100_000  # session turns; tokens per turn the same
MAX_TRACE_TOKENS = 1_000_000  # tokens of a synthesized routing trace (× layers × k entries: 60 × 8 → 1.9 GB)
MAX_EXPERTS = 4_096  # experts per layer (the largest public MoE models route over 384)
MAX_MIB = float(2**30)  # a memory amount in MiB: 1 PiB
MAX_SEED = 2**63 - 1  # numpy's and the synthetic writers' seeds are 64-bit
MAX_SHARDS = 4_096  # files of a model (workbench.formats.bounds.MAX_MEMBERS)
MAX_LISTED = 2**31 - 1  # rows a listing may be asked for


class FiniteRange(click.FloatRange):
    """A ``FloatRange`` that refuses ``nan`` and ``±inf`` (click's own lets nan through any bound)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def count(low: int, high: int) -> click.IntRange:
    """An integer in ``[low, high]``."""
    return click.IntRange(low, high)


def amount(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> FiniteRange:
    """A finite float in the range (``low_open``: above ``low``, ``high_open``: below ``high``)."""
    return FiniteRange(low, high, min_open=low_open, max_open=high_open)


def seconds() -> FiniteRange:
    """A timeout: more than 0, at most :data:`MAX_SECONDS`."""
    return amount(0, MAX_SECONDS, low_open=True)


def mebibytes() -> FiniteRange:
    """A memory amount in MiB: more than 0, at most :data:`MAX_MIB`."""
    return amount(0, MAX_MIB, low_open=True)


def seed() -> click.IntRange:
    """A seed: 0 to :data:`MAX_SEED`."""
    return count(0, MAX_SEED)


def bounded(param_type: click.ParamType) -> bool:
    """Whether a numeric option's type is one of these, bounded both ways (the test's check)."""
    if isinstance(param_type, FiniteRange):
        return param_type.min is not None and param_type.max is not None
    if isinstance(param_type, click.IntRange):
        return param_type.min is not None and param_type.max is not None
    return not isinstance(param_type, (click.types.IntParamType, click.types.FloatParamType))
