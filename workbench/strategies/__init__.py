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
        "peer-safetensors": ("workbench.strategies.peers:SafetensorsPeerStrategy",
                             "pip install 'workbench[peers]'"),
    },
)


def get_strategy(name: str) -> type[Strategy]:
    """The class registered as ``name`` (imported now)."""
    return STRATEGIES.get(name)


__all__ = ["STRATEGIES", "Engaged", "LoadResult", "Placement", "Strategy", "get_strategy"]
