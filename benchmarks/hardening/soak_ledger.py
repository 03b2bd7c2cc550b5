"""Soak: several runners at once into one ledger, many attempts each, watching what the runners hold.

    python benchmarks/hardening/soak_ledger.py [--runners 4] [--attempts 250] [--runs 1] [--workdir DIR]
                                     [--lock shared|per-runner] [--json OUT.json]

Each runner is its own process (as four sweeps on one machine would be) that keeps one ``Ledger`` open
and calls ``measure()`` ``--attempts`` times on small synthetic files, every registered strategy in
turn (one fresh worker per run, bytes verified), sampling its own RSS and open descriptors after every
attempt. Afterwards the ledger is checked: rows lost (attempts and runs counted against what the
runners started), ``PRAGMA integrity_check``, attempts left ``running``; and each runner's RSS after
its last attempt against after its 10th, and its descriptors over the whole run.

By default the runners share the device lock, as sweeps on one machine do (their runs take turns,
their ledger writes interleave freely); ``--lock per-runner`` gives each its own, so workers also
run at once. Prints a Markdown summary; ``--json`` writes every figure and sample.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RSS_AT = 10  # the attempt whose RSS is the baseline: imports and caches have settled by then


@dataclass(frozen=True)
class RunnerFigures:
    """What one runner saw of itself."""

    runner: int
    started: int
    errors: tuple[str, ...]
    rss_kib_at_10: int  # after the 10th attempt (or the one soak() was given)
    rss_kib_last: int
    fds_first: int
    fds_last: int
    fds_max: int
    seconds: float


@dataclass(frozen=True)
class SoakResult:
    """The soak's outcome: what the runners started against what the ledger holds, and their growth."""

    runners: tuple[RunnerFigures, ...]
    attempts_started: int
    attempts_in_ledger: int
    runs_expected: int
    runs_in_ledger: int
    still_running: int
    verdicts: dict[str, int]
    integrity: str
    seconds: float
    machine: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_lost(self) -> int:
        return (self.attempts_started - self.attempts_in_ledger) + (self.runs_expected - self.runs_in_ledger)

    @property
    def rss_growth_kib(self) -> int:
        return max(r.rss_kib_last - r.rss_kib_at_10 for r in self.runners)

    @property
    def fd_growth(self) -> int:
        return max(r.fds_last - r.fds_first for r in self.runners)


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run_one_runner(ledger_path: str, models: list[str], attempts: int, runs: int, campaign: str,
                   lock_dir: str, samples: str) -> None:
    """One runner: ``attempts`` measurements into the shared ledger, one sample line after each.

    Every registered strategy takes its turn on every file it can load on the host backend (one a peer's
    library is missing for, or that loads to GPUs only, sits out); a measurement that fails after its
    attempt opened is counted and kept, and the soak goes on."""
    from workbench.errors import WorkbenchError
    from workbench.formats import open_index
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure
    from workbench.strategies import STRATEGIES

    indexes = [open_index(m) for m in models]
    pairs = [(ix.path, name) for name in STRATEGIES for ix in indexes if _loads_here(STRATEGIES.get(name)(), ix)]
    with Ledger(ledger_path) as ledger, open(samples, "w", encoding="utf-8") as out:
        for k in range(attempts):
            path, name = pairs[k % len(pairs)]
            error = None
            try:
                measure([RunConfig(path, name)], runs=runs, cache="asis", ledger=ledger, campaign=campaign,
                        lock_dir=lock_dir)
            except WorkbenchError as exc:
                error = str(exc)
            sample = {"k": k, "t": time.time(), "rss_kib": _rss_kib(), "fds": len(os.listdir("/proc/self/fd")),
                      "strategy": name, "error": error}
            out.write(json.dumps(sample) + "\n")
            out.flush()


def _loads_here(strategy: Any, index: Any) -> bool:
    return bool(strategy.available()) and bool(strategy.fits(index, "host"))


def soak(runners: int, attempts: int, workdir: Path, *, runs: int = 1, lock: str = "shared",
         rss_at: int = RSS_AT) -> SoakResult:
    """Run the soak in ``workdir`` (models, ledger, samples) and check what it left; each runner's RSS
    growth is counted from its ``rss_at``-th attempt."""
    from workbench.formats.synth import write_synthetic

    workdir.mkdir(parents=True, exist_ok=True)
    models = [str(write_synthetic(workdir / "dense.gguf", format="gguf", layout="dense", size=256 << 10).path),
              str(write_synthetic(workdir / "moe.safetensors", format="safetensors", layout="moe",
                                  size=512 << 10, experts=4).path)]
    ledger = workdir / "soak.sqlite"
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(workdir / "cache")}
    procs = []
    t0 = time.monotonic()
    for i in range(runners):
        locks = workdir / ("locks" if lock == "shared" else f"locks-{i}")
        cmd = [sys.executable, __file__, "--child", str(ledger), str(attempts), str(runs), f"soak-{i}",
               str(locks), str(workdir / f"samples-{i}.jsonl"), *models]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    failures = [(p.wait(), p.stderr.read() if p.stderr else "") for p in procs]
    seconds = time.monotonic() - t0
    for code, err in failures:
        if code != 0:
            raise RuntimeError(f"a runner exited {code}: {err[-2000:]}")
    figures = tuple(_runner_figures(i, workdir / f"samples-{i}.jsonl", rss_at) for i in range(runners))
    return _check_ledger(ledger, figures, runs, seconds)


def _runner_figures(i: int, samples: Path, rss_at: int) -> RunnerFigures:
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    at = rows[min(rss_at, len(rows)) - 1]
    return RunnerFigures(
        runner=i, started=len(rows), errors=tuple(r["error"] for r in rows if r["error"]),
        rss_kib_at_10=at["rss_kib"], rss_kib_last=rows[-1]["rss_kib"], fds_first=rows[0]["fds"],
        fds_last=rows[-1]["fds"], fds_max=max(r["fds"] for r in rows), seconds=rows[-1]["t"] - rows[0]["t"])


def _check_ledger(ledger: Path, figures: tuple[RunnerFigures, ...], runs: int, seconds: float) -> SoakResult:
    conn = sqlite3.connect(str(ledger))
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        attempts = conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        run_rows = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        verdicts = dict(conn.execute("SELECT verdict, COUNT(*) FROM attempts GROUP BY verdict").fetchall())
    finally:
        conn.close()
    started = sum(r.started for r in figures)
    return SoakResult(figures, started, attempts, started * runs, run_rows, verdicts.get("running", 0),
                      verdicts, integrity, seconds, _machine())


def _machine() -> dict[str, Any]:
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), "0")
    return {"uname": " ".join(platform.uname()), "cpus": os.cpu_count(), "mem_gib": round(int(mem) / 2**20, 1),
            "python": platform.python_version(), "loadavg_after": os.getloadavg(),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def summary(result: SoakResult, load_before: tuple[float, ...]) -> str:
    """The figures as Markdown, one row per runner."""
    m = result.machine
    lines = [
        f"- machine: `{m['uname']}`, {m['cpus']} cores, {m['mem_gib']} GiB; Python {m['python']}",
        f"- date: {m['date_utc']}; load average before {_load(load_before)}, after {_load(m['loadavg_after'])}",
        f"- {len(result.runners)} runners, {result.attempts_started} attempts started, "
        f"{result.seconds:.0f} s ({result.attempts_started / result.seconds:.2f} attempts/s)",
        f"- ledger: {result.attempts_in_ledger} attempts, {result.runs_in_ledger} runs "
        f"(expected {result.runs_expected}); rows lost: **{result.rows_lost}**; integrity_check: "
        f"**{result.integrity}**; left running: {result.still_running}; verdicts: {result.verdicts}",
        f"- runner RSS growth, 10th attempt → last: at most **{result.rss_growth_kib / 1024:+.1f} MiB**; "
        f"open descriptors, first → last: at most **{result.fd_growth:+d}**", "",
        "| runner | attempts | errors | RSS after 10th | RSS after last | fds first → last (max) | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result.runners:
        lines.append(f"| {r.runner} | {r.started} | {len(r.errors)} | {r.rss_kib_at_10 / 1024:.1f} MiB | "
                     f"{r.rss_kib_last / 1024:.1f} MiB | {r.fds_first} → {r.fds_last} ({r.fds_max}) | "
                     f"{r.seconds:.0f} |")
    return "\n".join(lines)


def _load(avg: tuple[float, ...] | list[float]) -> str:
    return "/".join(f"{x:.2f}" for x in avg)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--child":
        ledger, attempts, runs, campaign, locks, samples, *models = args[1:]
        run_one_runner(ledger, models, int(attempts), int(runs), campaign, locks, samples)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--attempts", type=int, default=250, help="attempts per runner")
    parser.add_argument("--runs", type=int, default=1, help="runs per attempt")
    parser.add_argument("--lock", choices=("shared", "per-runner"), default="shared")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    opts = parser.parse_args(args)
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="wb-soak-"))
    load_before = os.getloadavg()
    result = soak(opts.runners, opts.attempts, workdir, runs=opts.runs, lock=opts.lock)
    print(summary(result, load_before))
    if opts.json:
        opts.json.write_text(json.dumps({**asdict(result), "rows_lost": result.rows_lost,
                                         "rss_growth_kib": result.rss_growth_kib, "fd_growth": result.fd_growth,
                                         "load_before": load_before, "lock": opts.lock, "runs": opts.runs},
                                        indent=1) + "\n")
    ok = result.rows_lost == 0 and result.integrity == "ok" and result.still_running == 0 and result.fd_growth <= 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
