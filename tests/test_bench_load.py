"""benchmarks/bench_load.py runs on the H200 only in full; its plan, its budget and one small end-to-end
run (host backend, a few MiB, a budget that cuts most of the plan) are checked here."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_load")
    finally:
        sys.path.remove(str(BENCH))


def test_plan_runs_the_goal_rows_first_and_every_strategy_after(bench):
    groups = bench.plan(["peer-a", "peer-b x=1"], ["odirect threads=2"], 5, 3, (1, 16))
    assert [g.name for g in groups] == ["warm", "threads", "cold", "warm-more", "cold-more", "warm-rest",
                                        "cold-rest"]
    warm, threads, cold, warm_more, cold_more, warm_rest, cold_rest = groups
    assert warm.specs == cold.specs == ("ring", "peer-a", "peer-b x=1") and cold.cache == "cold"
    assert threads.specs == ("ring threads=1", "ring threads=16") and threads.runs == 3
    assert "mmap register=1" in warm_more.specs and "mmap register=1" in cold_more.specs
    from workbench.strategies import STRATEGIES

    every = {n for n in STRATEGIES if getattr(STRATEGIES.get(n), "kind", "") != "peer"}
    assert every <= set(warm.specs) | set(warm_rest.specs)  # every workbench strategy, warm
    assert every <= set(cold.specs) | set(cold_rest.specs)  # and cold
    assert "odirect threads=2" in warm_rest.specs and warm_rest.specs == cold_rest.specs
    assert not set(warm.specs + warm_more.specs) & set(warm_rest.specs)
    assert not any(s.startswith("ring ") for s in cold_more.specs)  # slot sizes are a warm question
    assert [g.name for g in bench.plan([], [], 5, 3, (1,), ("cold", "threads"))] == ["threads", "cold"]


def test_peers_come_from_the_registry_by_kind(bench, monkeypatch):
    from workbench.registry import Registry
    from workbench.strategies import STRATEGIES

    fake = Registry("strategy", {n: (e.target, e.hint) for n, e in STRATEGIES.entries.items()})
    fake.register("peer-missing", "no_such_module_here:Peer", "pip install it")
    monkeypatch.setattr(bench, "STRATEGIES", fake)
    specs, missing = bench.peer_specs(["peer-safetensors mode=x"])
    assert "peer-safetensors" in specs and specs[-1] == "peer-safetensors mode=x"
    assert "ring" not in specs and any(m.startswith("peer-missing: module missing") for m in missing)


def test_budget_cuts_from_the_end_and_learns(bench):
    budget = bench.Budget(100.0 + bench.RESERVE_S, int(1e9), walls={"cold_read_file_8t": 2.0})
    budget.overhead = {"warm": 1.0, "cold": 1.0}
    budget.loads = {("a", "cold"): 4.0, ("b", "cold"): 4.0, ("c", "cold"): 4.0}
    group = bench.Group("cold", "cold", ("a", "b", "c"), 5)
    assert budget.estimate(group) == pytest.approx(75.0)
    fitted, cut = budget.fit(group)
    assert fitted.specs == ("a", "b", "c") and cut == []
    budget.loads[("c", "cold")] = 40.0
    fitted, cut = budget.fit(group)
    assert fitted.specs == ("a", "b") and cut == ["c"]
    assert budget.run_s("d", "cold") == pytest.approx(1.0 + 1 / (0.8 * 2.0))  # unmeasured: from the wall


@pytest.mark.timeout(300)
def test_a_small_run_end_to_end(bench, tmp_path, monkeypatch, isolated_cache):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    out = tmp_path / "out"
    code = bench.main(["--device", "host", "--dir", str(tmp_path), "--size", "2MiB", "--shape", "none",
                       "--runs", "1", "--scaling-runs", "1", "--threads", "1,2", "--ceiling-size", "4MiB",
                       "--file-threads", "2", "--budget-s", "60", "--groups", "warm,threads,warm-more,cold-rest",
                       "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "bench.json").read_text())
    rows = {(r["spec"], r["cache"]): r for r in doc["rows"]}
    ring = rows[("ring", "warm")]
    assert ring["n_verified"] == ring["n_runs"] == 1 and ring["gbps"] > 0
    assert ring["per_reader_ms"]["read"] > 0 and ring["phases_ms"]["staging"] > 0
    assert rows[("ring threads=2", "warm")]["group"] == "threads"
    text = (out / "bench.md").read_text()
    for part in ("## Walls (same run)", "cold_read_file_2t", "## warm", "## GB/s against reader threads",
                 "## Where the time goes", "cold: not asked for (--groups)", "## Ledger"):
        assert part in text, part
    names = {p.name for p in out.iterdir()}
    assert {"ledger.sqlite", "attempts.csv", "runs.csv", "bench.md", "bench.json"} == names  # no WAL left: 5 files


def test_specs_parse_like_the_command_line(bench):
    assert bench.parse_spec("lanes upload=pinned threads=8") == ("lanes", {"upload": "pinned", "threads": "8"})
    assert bench.parse_spec("ring") == ("ring", {})
