"""The strategy registry: name → "module:Class". Adding a strategy is one module and one line here."""
from __future__ import annotations

from workbench.settings import defaults
from workbench.errors import ParamError
from workbench.registry import Registry
from workbench.strategies.base import Engaged, LoadResult, Placement, Strategy

TORCH_PEERS = "pip install torch first (CI: torch==2.13.0, the CPU build), then 'workbench[peers-torch]'"


def _extra_strategies() -> dict[str, str]:
    """``$WORKBENCH_STRATEGIES`` (a strategy outside this package); it never shadows a built-in one."""
    extra = defaults.extra_strategies()
    clash = sorted(set(extra) & set(STRATEGIES.registered))
    if clash:
        raise ParamError("environment", defaults.STRATEGIES, f"{', '.join(clash)}: already a built-in strategy")
    return extra


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
        # Reference strategies (kind "peer"): a stock library's loader, measured by the same runner.
        "peer-safetensors": ("workbench.strategies.peers.safetensors_peer:SafetensorsPeerStrategy",
                             "pip install 'workbench[peers]'", "peer"),
        "peer-fastsafetensors": ("workbench.strategies.peers.fastsafetensors_peer:FastsafetensorsPeerStrategy",
                                 TORCH_PEERS, "peer"),
        "peer-runai": ("workbench.strategies.peers.runai_peer:RunaiPeerStrategy", TORCH_PEERS, "peer"),
        "peer-instanttensor": ("workbench.strategies.peers.instanttensor_peer:InstantTensorPeerStrategy",
                               TORCH_PEERS, "peer"),
    },
    extra=_extra_strategies,  # $WORKBENCH_STRATEGIES: name=module:Class, a module outside this package
)


def get_strategy(name: str) -> type[Strategy]:
    """The class registered as ``name`` (imported now)."""
    return STRATEGIES.get(name)


def strategy_kind(name: str) -> str:
    """``"strategy"`` or ``"peer"`` (a reference: a stock library's loader) for a registered name,
    from the registry alone (nothing is imported)."""
    entry = STRATEGIES.entries.get(name)
    return (entry.kind if entry is not None else "") or "strategy"


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


__all__ = ["STRATEGIES", "Engaged", "LoadResult", "Placement", "Strategy", "get_strategy", "heatmap_axes",
           "strategy_kind"]
