"""Strategy parameters: typed frozen dataclasses, parsed from ``k=v`` strings with clear errors."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.errors import ParamError

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


@dataclass(frozen=True)
class BaseParams:
    """Parameters every strategy shares. ``evict``: None follows the device (UMA → evict).

    Two class-level facts a strategy may declare about its parameters, so code that draws or tests
    every strategy never names one:

    - ``heatmap_axes``: (rows, columns), two numeric parameters whose grid the campaign figures draw
      as a heat map of GB/s (``warmer`` and ``lanes``: threads × chunk_mib);
    - ``small_pieces``: parameter overrides that cut even a small file into several pieces, so the
      shared test suite exercises the piecewise path (chunk boundaries inside a tensor);
    - ``variants``: parameter sets that take another path through the load (another upload mode, a
      pinned mapping, lane threads), so suites that check every strategy check every path.
    """

    heatmap_axes: ClassVar[tuple[str, str] | None] = None
    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = ()

    evict: bool | None = None


def check_param(owner: str, name: str, ok: bool, detail: str) -> None:
    """Raise ParamError(owner, name, detail) unless ``ok`` (for Params.__post_init__)."""
    if not ok:
        raise ParamError(owner, name, detail)


class Parameterized:
    """What every kind of strategy shares (single-process and ranked): a ``name`` and typed ``Params``,
    made from strings (the CLI's ``K=V``), with their defaults listed."""

    name: ClassVar[str]
    Params: ClassVar[type] = BaseParams

    def __init__(self, params: Any = None, **overrides: Any):
        base = params if params is not None else self.Params()
        self.params = dataclasses.replace(base, **overrides) if overrides else base

    @classmethod
    def from_strings(cls, raw: Mapping[str, Any]) -> Any:
        return cls(parse_params(cls.name, cls.Params, raw))

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls.Params)}

