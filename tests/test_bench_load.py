"""benchmarks/bench/bench_load.py runs on the H200 only in full; its plan, its budget and one small end-to-end
run (host backend, a few MiB, a budget that cuts most of the plan) are checked here."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def bench(bench_module):
    return bench_module("bench_load")


def test_plan_runs_the_goal_rows_first_and_every_strategy_after(bench):
    groups = bench.plan(["peer-a", "peer-b x=1"], ["odirect threads=2"], 5, 3, (1, 16))
    assert [g.name for g in groups] == ["warm", "threads", "cold", "warm-more", "cold-more", "warm-rest",
                                        "cold-rest"]
    warm, threads, cold, warm_more, cold_more, warm_rest, cold_rest = groups
    assert warm.specs == ("ring", "ring provision=background", "ring staging=wc", "peer-a", "peer-b x=1")  # side by side
    assert cold.specs == ("ring", "peer-a", "peer-b x=1") and cold.cache == "cold"
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
    # one peer, not every installed one: each peer run starts torch, and on a busy 2-core VM the eight
    # of them spent the budget before the threads group (the row this test asks for) could start
    monkeypatch.setattr(bench, "peer_specs", lambda *a, **k: (["peer-safetensors"], []))
    out = tmp_path / "out"
    code = bench.main(["--device", "host", "--dir", str(tmp_path), "--size", "2MiB", "--shape", "none",
                       "--runs", "1", "--scaling-runs", "1", "--threads", "1,2", "--ceiling-size", "4MiB",
                       "--file-threads", "2", "--budget-s", "240", "--groups", "warm,threads,warm-more,cold-rest",
                       "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "bench.json").read_text())
    rows = {(r["spec"], r["cache"]): r for r in doc["rows"]}
    ring = rows[("ring", "warm")]
    assert ring["n_verified"] == ring["n_runs"] == 1 and ring["gbps"] > 0
    # on host the ring reads straight into the destination (no staging hop, issue 25): no staging phase
    assert ring["per_reader_ms"]["read"] > 0 and ring["phases_ms"]["staging"] == 0
    assert rows[("ring threads=2", "warm")]["group"] == "threads"
    text = (out / "bench.md").read_text()
    for part in ("## Walls (same run)", "cold_read_file_2t", "## warm", "## GB/s against reader threads",
                 "## Where the time goes", "cold: not asked for (--groups)", "## Ledger"):
        assert part in text, part
    names = {p.name for p in out.iterdir()}
    assert {"ledger.sqlite", "attempts.csv", "runs.csv", "bench.md", "bench.json"} == names  # no WAL left: 5 files


@pytest.mark.timeout(300)
def test_a_group_stopped_at_its_budget_keeps_its_table(bench, tmp_path, monkeypatch, isolated_cache):
    """The budget runs out after 7 of the cold group's 8 runs (abba: ring has run 3 times, the peer 4):
    the table still shows both rows from the runs that finished, the ring's marked as stopped, with the
    finished group's columns; the ledger keeps the attempts as interrupted."""
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(bench, "peer_specs", lambda *a, **k: (["peer-safetensors"], []))
    checks = []

    def check(self):  # the real check goes by the clock; this one stops after the 7th run, every time
        checks.append(1)
        if len(checks) == 7:
            raise bench.OverBudget(f"budget of {self.seconds:.0f} s spent")

    monkeypatch.setattr(bench.Budget, "check", check)
    out = tmp_path / "out"
    code = bench.main(["--device", "host", "--dir", str(tmp_path), "--size", "2MiB", "--shape", "none",
                       "--runs", "4", "--ceiling-size", "4MiB", "--file-threads", "2", "--budget-s", "600",
                       "--groups", "cold", "--out", str(out)])
    assert code == 0 and len(checks) == 7
    rows = {r["spec"]: r for r in json.loads((out / "bench.json").read_text())["rows"]}
    assert (rows["ring"]["n_runs"], rows["ring"]["planned"], rows["peer-safetensors"]["n_runs"]) == (3, 4, 4)
    text = (out / "bench.md").read_text()
    assert "## cold" in text
    lines = {spec: next(x for x in text.splitlines() if x.startswith(f"| `{spec}` |")) for spec in rows}
    ring, peer = (lines[s].split(" | ") for s in ("ring", "peer-safetensors"))
    assert ring[2] == "3/3 (3) — stopped at its budget: 3/4 runs" and peer[2] == "4/4 (4)"
    # median (min–max), spread, GB/s (a number: a 2 MiB file may read 0.00)
    assert ring[3].count("–") == 1 and ring[4].endswith("%") and float(ring[5]) >= 0
    assert ring[6].startswith("cold_read_") and ring[7].endswith("%")  # the bounding wall, % of it
    assert peer[8] == "best peer" and "× [" in ring[8]  # the ratio with its interval, as for a finished group
    assert "- cut: cold: stopped mid-way after 7/8 runs, budget of 600 s spent" in text
    attempts = (out / "attempts.csv").read_text()
    assert attempts.count("interrupted after 7/8 runs") == 2


def test_specs_parse_like_the_command_line(bench):
    assert bench.parse_spec("lanes upload=pinned threads=8") == ("lanes", {"upload": "pinned", "threads": "8"})
    assert bench.parse_spec("ring") == ("ring", {})


def test_each_variant_is_compared_with_its_default_in_the_same_group(bench):
    from types import SimpleNamespace

    import load_report
    import load_tables

    def row(spec, times, group="warm"):
        ms = sorted(t * 1e3 for t in times)
        return load_tables.Row(spec, group, "warm", "workbench", list(times), len(times), len(times), 1.0, ms[len(ms) // 2],
                               ms[0], ms[-1], 1.0, None, None, "")

    base = [0.100, 0.104, 0.098, 0.101, 0.099, 0.102]
    rows = [row("ring", base), row("ring staging=wc", [t * 0.8 for t in base]),
            row("ring provision=background", [t * 1.0 for t in base]), row("ring threads=8", base, group="threads")]
    lines = load_report.variants_table(SimpleNamespace(rows=rows))
    text = "\n".join(lines)
    assert "| `ring staging=wc` | `ring` | warm | 6 | 1.25×" in text and "faster" in text
    assert "| `ring provision=background` | `ring` |" in text
    assert "ring threads=8" not in text  # another group: not paired round by round
