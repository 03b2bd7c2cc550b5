"""Multi-rank loads, measured like single ones: the run runner (cache state set and checked over every
file before each run, configs interleaved, the device lock, the ledger, verdicts) with one run being
``ranks`` fresh rank processes (``launch.py``) instead of one worker.

A config's ``params`` carry the run's own keys beside the ranked strategy's: ``ranks`` (how many),
``layout`` (tp | ep) and ``transport`` (gloo | nccl | auto: NCCL when each rank has a GPU of its own,
else gloo — NCCL refuses two ranks on one device). They stay in the ledger's params, so two rank counts
are two attempts. A run's time is the first rank's start to the last rank's end; its bytes are every
rank's together (aggregate GB/s); every rank's numbers go in the run's report (``ranks``).
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

from workbench.errors import ParamError, StrategyUnavailable
from workbench.measure.ranks.launch import launch_ranks
from workbench.measure.run.spawn import Outcome
from workbench.records import LoadSummary, RankReport, RanksSummary, RunConfig, WorkerReport

RUN_KEYS = ("ranks", "layout", "transport")
TRANSPORTS = ("auto", "gloo", "nccl")
MAX_RANKS = 64


def split_params(config: RunConfig) -> tuple[int, str, str, dict[str, Any]]:
    """(ranks, layout, transport, the strategy's own params) of a ranked config; ParamError in one line."""
    params = dict(config.params)
    raw = str(params.pop("ranks", ""))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_RANKS:
        raise ParamError("--ranks", raw, f"a whole number 1..{MAX_RANKS}")
    layout, transport = str(params.pop("layout", "tp")), str(params.pop("transport", "auto"))
    if transport not in TRANSPORTS:
        raise ParamError("transport", transport, f"one of {', '.join(TRANSPORTS)}")
    return int(raw), layout, transport, params


def resolve_transport(transport: str, device: str, world: int) -> str:
    """``auto``: NCCL when every rank has a GPU of its own (cuda, no ordinal, ≥ ``world`` devices), else gloo."""
    if transport != "auto":
        return transport
    if device != "cuda":
        return "gloo"
    import torch

    return "nccl" if torch.cuda.device_count() >= world else "gloo"


def preflight_ranks(configs: Sequence[RunConfig]) -> None:
    """Everything no run could survive, one line before anything is recorded: the strategy and its
    params, torch.distributed, the backend, the model, and every rank's plan (a dim the rank count does
    not divide is refused here)."""
    from workbench.formats import open_index
    from workbench.measure.run.runner import require_device
    from workbench.strategies.ranked import get_ranked, plan_rank

    indexes: dict[str, Any] = {}
    for config in configs:
        world, layout, transport, params = split_params(config)
        cls = get_ranked(config.strategy)
        cls.from_strings(params)
        avail = cls.available()
        if not avail:
            raise StrategyUnavailable(config.strategy, avail.reason)
        _require_distributed(transport)
        require_device(config.device)
        index = indexes.get(config.file) or indexes.setdefault(config.file, open_index(config.file))
        for rank in range(world):
            plan_rank(index, layout, rank, world)


def _require_distributed(transport: str) -> None:
    try:
        import torch.distributed as dist
    except ImportError:
        raise StrategyUnavailable("--ranks", "needs torch (torch.distributed): pip install torch") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise StrategyUnavailable("--ranks", "this torch has no torch.distributed with gloo")
    if transport == "nccl" and not dist.is_nccl_available():
        raise StrategyUnavailable("--ranks", "transport=nccl: this torch has no NCCL")


def run_ranks(config: RunConfig, *, verify: bool = True, timeout_s: float = 600.0) -> Outcome:
    """One run: ``ranks`` fresh rank processes on ``config``, folded into one :class:`Outcome`."""
    world, layout, transport, params = split_params(config)
    job = {"file": config.file, "strategy": config.strategy, "params": params, "layout": layout,
           "device": config.device, "transport": resolve_transport(transport, config.device, world),
           "verify": verify, "pg_timeout_s": max(5.0, min(timeout_s, 120.0))}
    reports, wall = launch_ranks(job, world, timeout_s)
    return fold(config.strategy, layout, reports, config, wall)


def fold(strategy: str, layout: str, reports: Sequence[RankReport], config: RunConfig, wall: float) -> Outcome:
    """The run the ranks make together: the window first start → last end, every rank's bytes."""
    ranks = RanksSummary(layout, strategy, tuple(sorted(reports, key=lambda r: r.rank)))
    slow, window, held = ranks.slowest, ranks.window_s, ranks.bytes_held
    verified = ranks.verified
    load = LoadSummary(strategy=strategy, params=dict(config.params), device=config.device, bytes=held,
                       n_tensors=sum(r.n_slices for r in ranks.ranks), load_s=window,
                       gbps=held / window / 1e9 if window > 0 else 0.0, phases=dict(slow.phases), minflt=0,
                       majflt=0, evict=False, evict_source="", notes=(ranks.line(), *slow.notes),
                       counters={"bytes_read": sum(r.bytes_read for r in ranks.ranks),
                                 "bytes_interconnect": sum(r.bytes_interconnect for r in ranks.ranks)})
    report = WorkerReport(pid=ranks.ranks[0].pid, file=config.file, strategy=strategy, device=config.device,
                          load_s=window, load=load, verified=verified, ranks=ranks)
    return Outcome(pid=ranks.ranks[0].pid, load_s=window, wall_s=wall, bytes=held, verified=verified,
                   phases=dict(slow.phases), report=report)


def measure_ranks(configs: Sequence[RunConfig], *, verify: bool = True, timeout_s: float = 600.0,
                  **kwargs: Any) -> list[Any]:
    """:func:`workbench.measure.run.runner.measure` for ranked configs (same keywords)."""
    from workbench.measure.run.model import Models
    from workbench.measure.run.runner import measure_with

    preflight_ranks(configs)
    run_fn = functools.partial(run_ranks, verify=verify, timeout_s=timeout_s)
    return measure_with(run_fn, configs, models=Models(), **kwargs)



def spread_line(runs: Sequence[Any]) -> str:
    """One line on the ranks of an attempt's runs ('' for single-process runs): the slowest rank against
    the median rank (median and worst over the runs), how far apart they started, and a rank's bytes."""
    import statistics

    summaries = [r.report.ranks for r in runs if r.ok and r.report.ranks is not None]
    if not summaries:
        return ""
    ratios = [s.straggler_ratio for s in summaries]
    mib = 1 << 20

    def total(field: str) -> str:  # over every rank of a run, the median run; and the most one rank did
        per_run = statistics.median(sum(getattr(r, field) for r in s.ranks) for s in summaries)
        most = max(getattr(r, field) for s in summaries for r in s.ranks)
        return f"{per_run / mib:.1f} MiB (one rank at most {most / mib:.1f})"

    return (f"{summaries[0].world} ranks ({summaries[0].layout}): slowest rank {statistics.median(ratios):.2f}x the "
            f"median rank (worst {max(ratios):.2f}x over {len(summaries)} runs), start skew up to "
            f"{max(s.start_skew_s for s in summaries) * 1e3:.1f} ms; a run read {total('bytes_read')}, moved "
            f"{total('bytes_interconnect')} over the process group, holds {total('bytes_held')}")
