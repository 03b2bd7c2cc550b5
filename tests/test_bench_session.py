"""benchmarks/bench/bench_session.py end to end at a tiny size: both A/Bs, their tables and verdicts."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS / "bench"), str(BENCHMARKS / "figures")]  # bench_session; session_pressure_table

import bench_session  # noqa: E402
from bench_session_report import pressure_verdict  # noqa: E402

from workbench.errors import ParamError  # noqa: E402
from workbench.measure.session.pressure import MemoryPressure  # noqa: E402


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def test_bench_session_writes_both_parts(tmp_path):
    parts = "placement,pressure"
    try:
        with MemoryPressure(64, "cgroup"):
            pass
    except ParamError:
        parts = "placement"  # no memory cgroup here: the pressure part would lock a machine-wide balloon
    out = tmp_path / "s.md"
    assert bench_session.main(["--dir", str(tmp_path), "--size", "16MiB", "--experts", "64", "--cache-mib", "1",
                               "--turns", "3", "--tokens", "1", "--rounds", "1", "--compute", "sleep:1",
                               "--parts", parts, "--headroom-mib", "64", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Bounce vs in place: a decode session A/B" in text
    assert "ok: every cell read the same bytes per token" in text and "| placement=inplace | tok/s |" in text
    if "pressure" in parts:
        assert "### Limit" in text and "cgroup v" in text
        assert "Method: **cgroup**" in text and "made under " in text  # which method ran, and where
        assert any(w in text for w in ("Reproduced", "Not reproduced", "Direction seen", "Half reproduced"))


def _effect(metric, ratio, verdict, base=1.0, cand=1.0):
    return SimpleNamespace(metric=metric, ratio=ratio, verdict=verdict, baseline_median=base, candidate_median=cand,
                           line=lambda: f"{metric} {ratio}")


def _cells(off_memory):
    ok = SimpleNamespace(memory="reclaim and re-reads")
    return [(0, 0, ok), (1, 0, SimpleNamespace(memory=off_memory))]


@pytest.mark.parametrize("faults,tps,memory,head", [
    (("higher", 2.0), ("lower", 0.8), "reclaim", "**Reproduced**:"),
    (("inconclusive", 1.1), ("inconclusive", 0.9), "reclaim", "**Direction seen, not established**"),
    (("inconclusive", 1.0), ("inconclusive", 1.01), "reclaim", "**Not reproduced**"),
    (("inconclusive", None), ("inconclusive", None), "OOM-killed (cgroup oom_kill +1)", "**Reproduced, to the end**"),
])
def test_pressure_verdict_reads_the_effects(faults, tps, memory, head):
    effects = [_effect("major faults/token", faults[1], faults[0], 1.0, 2.0), _effect("tok/s", tps[1], tps[0])]
    result = SimpleNamespace(effects=effects, cells=_cells(memory))
    assert pressure_verdict(result).startswith(head)


def test_the_pressure_report_shows_each_cells_locked_bytes_and_kind_and_no_finding_from_own_files():
    """Issue 23 §4: the H200's balloon cells measured the method (own-files); the report says so per cell
    and in its verdict, with what each worker locked of its own file pages."""
    from bench_session_report import pressure_cells

    from workbench.expert.session_records import SessionFacts, TurnRecord
    from workbench.expert.session_summary import SessionReport, summarize
    from workbench.measure.session.runner import SessionResult

    def cell(majflt, pinned, outcome):
        turns = [TurnRecord(turn=i, tokens=4, bytes_read=1, hits=1, misses=1, evictions=0, minflt=0, majflt=n,
                            accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=0, seconds=1.0, tokens_per_s=4.0)
                 for i, n in enumerate(majflt)]
        facts = SessionFacts("inplace", "", "ON", "pread", "", "on", "lru", 1, 1, 1, "synthetic", "", "host", False,
                             pinned_file_bytes=pinned)
        report = SessionReport(tuple(turns), summarize(turns, facts))
        return SessionResult("a" * 32, "m", "host", "cold", None, report, "baseline", "", None,
                             memory=f"balloon: x — {outcome}", memory_method="balloon", memory_outcome=outcome,
                             memory_limit="balloon: x")

    own = "pressure reached the session's own files: 2,956 major faults in the 3 turns after turn 0"
    cells = [(0, 0, cell([24, 0, 0, 0], 327 << 20, "no pressure seen")), (1, 0, cell([24, 0, 700, 2256], -1, own))]
    result = SimpleNamespace(cells=cells, arms=[SimpleNamespace(label="on"), SimpleNamespace(label="off")],
                             effects=[_effect("tok/s", 0.6, "inconclusive")])
    rows = [line for line in pressure_cells(result) if line.startswith("| 1") or line.startswith("| 2")]
    assert "own file pages locked MiB" in pressure_cells(result)[1] and "| kind |" in pressure_cells(result)[1]
    assert "| 327.0 |" in rows[0] and "| none |" in rows[0]
    assert "| — |" in rows[1] and "| own-files |" in rows[1]
    assert pressure_verdict(result).startswith("**Not a finding**: in 1 of 2 cells")


def test_the_h200_pressure_run_recomputes_from_its_export():
    """docs/benchmarks/session-pressure-h200.md's figures, from the committed ledger export (2026-12-03)."""
    from session_pressure_table import cells, ratios

    table = cells(Path(__file__).resolve().parents[1] / "docs/benchmarks/h200-2026-12-03/session-pressure/session-pressure")
    pairs, effect = ratios(table)
    assert [round(a / b, 2) for _, a, b in pairs] == [1.10, 0.90, 0.94, 0.09, 0.60]
    assert effect.startswith("0.88× [0.08–1.84] (inconclusive")
    squeezed = table[table["turns after turn 0"] >= 3]
    assert len(squeezed) == 10 and set(squeezed["kind (the balloon rule)"]) == {"own-files"}
    assert squeezed["majflt after turn 0"].between(2088, 4778).all()
