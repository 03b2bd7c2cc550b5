"""What a load strategy is: a name, typed parameters, an availability check and ``load``.

A strategy subclass sets ``name`` and ``Params`` (a frozen dataclass with defaults) and implements
``_load(ctx)``; the base class does the bookkeeping every strategy needs identically: phase times,
page-fault deltas, the eviction policy, and the frozen :class:`LoadResult`.
"""
from __future__ import annotations

import dataclasses
import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping

from workbench.errors import ParamError
from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.upload.base import Device, DeviceBuffer

PHASES = ("index", "prefetch", "read", "upload", "sync")


@dataclass(frozen=True)
class Engaged:
    """What a fast path actually did: ``zero_copy: 92/92 tensors`` (ON), ``0/92`` (INERT)."""

    feature: str
    done: int
    total: int
    unit: str = "tensors"
    note: str = ""

    @property
    def state(self) -> str:
        if self.total == 0 or self.done == 0:
            return "INERT"
        return "ON" if self.done == self.total else "PARTIAL"

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.feature}: {self.done}/{self.total} {self.unit} — {self.state}{note}"

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "state": self.state, "text": str(self)}


@dataclass(frozen=True)
class Placement:
    """Where one tensor landed: ``buffer`` at ``offset``; verification reads it back from there."""

    tensor: str
    buffer: DeviceBuffer = field(compare=False)
    offset: int
    nbytes: int


@dataclass(frozen=True)
class LoadResult:
    """One load, frozen. ``placements`` stay in-process (device handles); the rest is JSON."""

    strategy: str
    params: Mapping[str, Any]
    device: str
    bytes_moved: int
    n_tensors: int
    load_s: float
    phases: Mapping[str, float]
    minflt: int
    majflt: int
    evict: bool
    evict_source: str
    engaged: tuple[Engaged, ...]
    notes: tuple[str, ...] = ()
    placements: tuple[Placement, ...] = field(default=(), repr=False, compare=False)

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.load_s / 1e9 if self.load_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "params": dict(self.params),
            "device": self.device,
            "bytes": self.bytes_moved,
            "n_tensors": self.n_tensors,
            "load_s": self.load_s,
            "gbps": self.gbps,
            "phases": dict(self.phases),
            "minflt": self.minflt,
            "majflt": self.majflt,
            "evict": self.evict,
            "evict_source": self.evict_source,
            "engaged": [e.to_json() for e in self.engaged],
            "notes": list(self.notes),
        }


class PhaseClock:
    """Accumulates wall time per phase; phases may repeat and interleave (read, upload, read, …)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {p: 0.0 for p in PHASES}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] = self.totals.get(phase, 0.0) + time.perf_counter() - t0


def page_faults() -> tuple[int, int]:
    """(minor, major) page faults of this process so far, all threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt, ru.ru_majflt


def parse_params(owner: str, cls: type, raw: Mapping[str, Any]) -> Any:
    """Build the ``Params`` dataclass ``cls`` from strings or values; unknown names are errors."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise ParamError(owner, key, f"unknown; known: {', '.join(fields) or 'none'}")
        out[key] = _coerce(owner, key, fields[key].type, value)
    return cls(**out)


def _coerce(owner: str, key: str, annotation: Any, value: Any) -> Any:
    text = str(annotation)
    if not isinstance(value, str):
        return value
    low = value.strip().lower()
    if "None" in text and low in ("none", "auto", ""):
        return None
    try:
        if "bool" in text:
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if "int" in text:
            return int(low, 0)
        if "float" in text:
            return float(low)
    except ValueError:
        raise ParamError(owner, key, f"cannot read {value!r} as {text}") from None
    return value


class Strategy:
    """Base of every load strategy. Subclasses: ``name``, ``Params``, ``summary``, ``_load``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    Params: ClassVar[type]

    def __init__(self, params: Any = None, **overrides: Any):
        base = params if params is not None else self.Params()
        self.params = dataclasses.replace(base, **overrides) if overrides else base

    @classmethod
    def from_strings(cls, raw: Mapping[str, Any]) -> "Strategy":
        return cls(parse_params(cls.name, cls.Params, raw))

    @classmethod
    def available(cls) -> Availability:
        return Availability(True)

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls.Params)}

    def load(self, index: TensorIndex, device: Device) -> LoadResult:  # pragma: no cover - abstract
        raise NotImplementedError
