"""bench_load.py's session: the ledger, the walls of the run, and the Markdown it writes.

One row per configuration and cache state: runs that finished with verified bytes, the median load
(min–max), spread, GB/s, the wall the runner bounds it by and the fraction of it, and the ratio to the
best peer of the same state with its bootstrap interval (``records.format_effect``). A group stopped
at the budget keeps its rows, from the runs that finished, each marked with how many of its runs ran.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbench.errors import WorkbenchError
from workbench.formats import open_index
from workbench.formats.synth import parse_size
from workbench.ledger import Ledger, export_csv, markdown_table
from workbench.measure.ceilings.walls import measure_ceilings
from workbench.measure.run.effect import ratio_effect
from workbench.measure.run.environment import collect_environment
from workbench.measure.run.verify import reference_checksums
from workbench.records import format_effect
from workbench.strategies import STRATEGIES


@dataclass
class Row:
    """One configuration in one cache state, as measured."""

    spec: str
    group: str
    cache: str
    kind: str  # "peer" or "workbench"
    times: list[float]  # load seconds of the usable runs, in round order
    n_runs: int
    n_verified: int
    gbps: float | None
    median_ms: float | None
    min_ms: float | None
    max_ms: float | None
    spread_pct: float | None
    wall: str | None
    wall_gbps: float | None
    engaged: str
    vs_peer: str = "—"
    errors: list[str] = field(default_factory=list)
    phases_ms: dict[str, float] = field(default_factory=dict)  # median per phase (loading thread)
    per_reader_ms: dict[str, float] = field(default_factory=dict)  # median thread time per reader (ring)
    planned: int = 0  # runs the plan gave it; more than n_runs when its group stopped at the budget

    @property
    def fraction(self) -> float | None:
        return self.gbps / self.wall_gbps if self.gbps and self.wall_gbps else None

    @property
    def stopped(self) -> str:
        """``stopped at its budget: 4/5 runs`` when its group stopped before its last run, else ''."""
        return f"stopped at its budget: {self.n_runs}/{self.planned} runs" if self.n_runs < self.planned else ""


def kind_of(spec: str) -> str:
    name = spec.split()[0]
    try:
        return "peer" if getattr(STRATEGIES.get(name), "kind", "") == "peer" else "workbench"
    except (ImportError, WorkbenchError):  # not importable here, or not registered: the runner will say
        return "workbench"


def make_row(group: Any, spec: str, res: Any) -> Row:
    usable = sorted((r for r in res.runs if r.ok and r.verified is not False), key=lambda r: r.position)
    s = res.stats
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    first = next((r for r in res.runs if r.ok), None)
    return Row(spec=spec, group=group.name, cache=group.cache, kind=kind_of(spec),
               times=[r.load_s for r in usable], n_runs=len(res.runs),
               n_verified=sum(r.verified is True for r in res.runs), gbps=s.gbps, median_ms=ms(s.median_s),
               min_ms=ms(s.min_s), max_ms=ms(s.max_s), spread_pct=s.spread_pct, wall=res.ceiling_name,
               wall_gbps=res.ceiling_gbps, engaged="; ".join(first.engaged) if first else "",
               errors=[str(r.error).strip().splitlines()[-1][:120] for r in res.runs if r.error],
               phases_ms=_median_ms([dict(r.phases) for r in usable]), per_reader_ms=_per_reader(usable),
               planned=group.runs)


def _median_ms(samples: list[dict[str, float]], scale: float = 1e3) -> dict[str, float]:
    keys = sorted({k for sample in samples for k in sample})
    return {k: statistics.median(sample.get(k, 0.0) for sample in samples) * scale for k in keys} if samples else {}


def _per_reader(runs: list[Any]) -> dict[str, float]:
    """The reader threads' summed time per activity (``*_us`` counters), per reader, in ms."""
    samples = []
    for r in runs:
        load = r.report.load
        if load is None or not load.path.readers:
            continue
        tallies = {k[:-3]: v / 1e3 / load.path.readers for k, v in load.counters.items()
                   if k.endswith("_us") and k != "alloc_us"}
        if tallies:
            samples.append(tallies)
    return _median_ms(samples, scale=1.0)


def compare_to_best_peer(rows: list[Row]) -> Row | None:
    """Fill ``vs_peer`` (best peer median / row median, with its interval) per cache state."""
    best = None
    for cache in ("warm", "cold"):
        peers = [r for r in rows if r.cache == cache and r.kind == "peer" and r.times]
        if not peers:
            continue
        top = min(peers, key=lambda r: r.median_ms)
        best = best or top
        for r in rows:
            if r.cache == cache and r.times:
                paired = r.group == top.group  # measured interleaved, round by round
                r.vs_peer = "best peer" if r is top else str(ratio_effect(top.times, r.times, paired=paired))
    return best


@dataclass
class Session:
    """Everything one bench_load run knows; ``write`` saves it after every step."""

    args: Any
    model: Path
    out: Path
    ledger: Ledger
    nbytes: int
    n_tensors: int
    walls: dict[str, float]
    skipped_walls: list[tuple[str, str]]
    setup: dict[str, float]
    environment: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)
    device_info: dict[str, Any] = field(default_factory=dict)
    total_s: float | None = None
    rendered: str = ""
    stamp: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))

    @classmethod
    def start(cls, args: Any, model: Path, out: Path, made_s: float, say: Callable[[str], None]) -> "Session":
        from workbench.io.identity import file_identity

        index = open_index(model)
        t0 = time.perf_counter()
        file_identity(model)  # the file's hash, which every attempt records: once, before any run
        reference_checksums(index)  # once, before any run, so no run's verification pays for it
        checksum_s = time.perf_counter() - t0
        say(f"file hash and reference checksums in {checksum_s:.1f} s; measuring the walls")
        ledger = Ledger(out / "ledger.sqlite")
        t0 = time.perf_counter()
        report = measure_ceilings(model.parent, devices=(args.device,), size=parse_size(args.ceiling_size),
                                  ledger=ledger, file=model, progress=say,
                                  file_threads=[int(t) for t in args.file_threads.split(",")])
        setup = {"file_s": made_s, "checksums_s": checksum_s, "walls_s": time.perf_counter() - t0}
        return cls(args, model, out, ledger, index.nbytes, len(index), {c.name: c.gbps for c in report.ceilings},
                   list(report.skipped), setup, collect_environment(str(model.parent)))

    def note_cut(self, group: Any, cut: list[str], budget: Any) -> None:
        for spec in cut:
            self.cut.append(f"{spec} ({group.cache}, {group.name}): over the budget — ~{budget.run_s(spec, group.cache):.1f} s "
                            f"per run x {group.runs}, {max(budget.left(), 0):.0f} s left")

    def add(self, group: Any, results: list[Any]) -> None:
        for spec, res in zip(group.specs, results):
            self.rows.append(make_row(group, spec, res))
            ok = next((r for r in res.runs if r.ok), None)
            if ok is not None and not self.device_info:
                self.device_info = dict(ok.report.device_info or {})

    def finish(self, total_s: float) -> None:
        self.total_s = total_s
        self.write()
        self.ledger.close()  # checkpoints the WAL: one file to bring back, not three

    def write(self) -> None:
        compare_to_best_peer(self.rows)
        export_csv(self.ledger, self.out)
        self.rendered = self.markdown()
        (self.out / "bench.md").write_text(self.rendered + "\n", encoding="utf-8")
        doc = {"date": self.stamp, "model": str(self.model), "bytes": self.nbytes, "tensors": self.n_tensors,
               "walls": self.walls, "setup": self.setup, "total_s": self.total_s, "device": self.device_info,
               "rows": [{**asdict(r), "fraction": r.fraction} for r in self.rows],
               "unavailable": self.unavailable, "cut": self.cut}
        (self.out / "bench.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")

    def markdown(self) -> str:
        from load_report import render

        return render(self)

    def ledger_tables(self) -> list[str]:
        campaigns = sorted({f"load-{r.group}" for r in self.rows})
        return [markdown_table(self.ledger, c) for c in campaigns]

    def machine(self) -> str:
        env, dev = self.environment, self.device_info
        ram = env.get("ram_bytes", 0) / 2**30
        gpu = ", ".join(str(dev[k]) for k in ("name", "arch", "driver", "binding") if dev.get(k))
        return (f"{env.get('hostname')}: {env.get('cpu_model')}, {env.get('cores')} cores, {ram:.0f} GiB RAM, "
                f"{env.get('fs_type')} on {env.get('fs_source')}, {env.get('kernel')}" + (f"; {gpu}" if gpu else ""))

    def files(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir() if p.is_file() and not p.name.startswith("."))

