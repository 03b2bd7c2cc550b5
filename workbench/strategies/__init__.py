"""The strategy registry: name → "module:Class". Adding a strategy is one module and one line here."""
from __future__ import annotations

from workbench.registry import Registry
from workbench.strategies.base import Engaged, LoadResult, Placement, Strategy

STRATEGIES: Registry[Strategy] = Registry(
    "strategy",
    {
        "pread": ("workbench.strategies.pread:PreadStrategy", ""),
        "willneed": ("workbench.strategies.willneed:WillneedStrategy", ""),
        "warmer": ("workbench.strategies.warmer:WarmerStrategy", ""),
        "mmap": ("workbench.strategies.mmap:MmapStrategy", ""),
        "populate": ("workbench.strategies.populate:PopulateStrategy", ""),
        "lanes": ("workbench.strategies.lanes:LanesStrategy", ""),
        "odirect": ("workbench.strategies.odirect:OdirectStrategy", ""),
        "experts": ("workbench.strategies.experts:ExpertsStrategy", ""),
        "ring": ("workbench.strategies.ring:RingStrategy", ""),
        "peer-safetensors": ("workbench.strategies.peers:SafetensorsPeerStrategy",
                             "pip install 'workbench[peers]'"),
    },
)


def get_strategy(name: str) -> type[Strategy]:
    """The class registered as ``name`` (imported now)."""
    return STRATEGIES.get(name)


def heatmap_axes() -> dict[str, tuple[str, str]]:
    """Strategy name → the two parameters its grid is drawn over (its ``Params.heatmap_axes``), for
    every registered strategy that declares them; one whose module cannot be imported here is left out."""
    axes = {}
    for name in STRATEGIES:
        try:
            declared = STRATEGIES.get(name).Params.heatmap_axes
        except ImportError:
            continue
        if declared:
            axes[name] = (str(declared[0]), str(declared[1]))
    return axes


__all__ = ["STRATEGIES", "Engaged", "LoadResult", "Placement", "Strategy", "get_strategy", "heatmap_axes"]
