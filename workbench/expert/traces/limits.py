"""How big a trace may be and what its numbers may hold: checked before anything is allocated.

A trace file's header (a ``.npy`` shape) or its size bounds what reading it can cost; ids beyond these
limits are refused in one line naming the file and the place, never an ``OverflowError`` or an
allocation the machine cannot make.
"""
from __future__ import annotations

from workbench.errors import TraceError

MAX_EXPERTS = 1 << 16  # expert ids per layer: 0 .. 65535 (the largest models route among 512)
MAX_LAYER = 1 << 16  # layer numbers: 0 .. 65535
MAX_POSITION = 1 << 48  # token positions
MAX_K = 256  # experts per token per layer
MAX_IDS = 1 << 27  # expert ids in one trace (512 MiB as int32): a trace of 10^5 tokens x 64 layers x k=16 fits
MAX_LINE_BYTES = 1 << 20  # one JSONL record


def check_ids(path: str, what: str, count: int) -> None:
    """Refuse a trace that would hold more than :data:`MAX_IDS` expert ids."""
    if count > MAX_IDS:
        raise TraceError(path, f"{what}: {count:,} expert ids, more than a trace may hold ({MAX_IDS:,}); "
                               "cut it into shorter traces")


def check_range(path: str, where: str, name: str, value: int, limit: int) -> None:
    """Refuse ``value`` outside ``[0, limit)``, naming the place."""
    if not 0 <= value < limit:
        raise TraceError(path, f"{where}: {name} {value} out of range (0 .. {limit - 1})")
