"""Peers through the runner, as `workbench compare` runs them: a fresh worker per run (the pre-window
hook imports the library and torch before the window opens, Run:ai's per-process settings take effect),
the same verification, the peer kind recorded in the ledger and listed in every table — while the
ledger's ``attempts.kind`` stays ``strategy`` (a peer is measured the way every strategy is)."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from workbench.errors import StrategyUnavailable
from workbench.ledger import Ledger
from workbench.ledger.export import export_csv, markdown_table
from workbench.measure import RunConfig, measure
from workbench.measure.run.tables import attempts_table
from workbench.strategies import get_strategy

pytest.importorskip("torch")


@pytest.fixture
def ledger(tmp_path: Path, isolated_cache: Path):
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


def needs(name: str) -> None:
    avail = get_strategy(name).available()
    if not avail:
        pytest.skip(f"{name}: {avail.reason}")


def test_peers_run_in_workers_verified_and_listed_as_peers(dtype_model, ledger, tmp_path):
    for name in ("peer-safetensors", "peer-fastsafetensors", "peer-runai"):
        needs(name)
    path = dtype_model("bf16").path
    configs = [RunConfig(path, "pread"), RunConfig(path, "peer-fastsafetensors", {"direct": "0"}),
               RunConfig(path, "peer-runai", {"direct": "0"}), RunConfig(path, "peer-runai")]
    results = measure(configs, runs=1, cache="warm", ledger=ledger, lock_dir=tmp_path / "locks")
    assert [r.verdict != "failed" for r in results] == [True] * 4, [r.notes for r in results]
    assert all(run.verified for r in results for run in r.runs)
    for r in results[1:]:  # the library and torch were imported before the window, not inside it
        timings = r.runs[0].report.timings
        assert timings.prepare_s is not None and timings.prepare_s > 0
        assert timings.window_imports == ()
    buffered, default = (r.runs[0].report.load for r in results[2:])
    assert "fs strategy io_uring_buffered" in buffered.engaged[0].note or \
        "fs strategy sync_buffered" in buffered.engaged[0].note  # the per-process setting took effect
    assert buffered.path.direct is False and buffered.path.readers == 16
    used = default.engaged[0].note.split("fs strategy ")[1].split(" ")[0]
    assert used in ("io_uring_direct", "libaio_direct", "sync_buffered")  # the library's own list
    assert default.path.direct is ("direct" in used)

    attempts = ledger.attempts()
    kinds = {a["label"]: a["environment"]["strategy_kind"] for a in attempts.to_dict("records")}
    assert kinds == {"pread": "strategy", "peer-fastsafetensors direct=0": "peer",
                     "peer-runai direct=0": "peer", "peer-runai": "peer"}
    assert set(attempts["kind"]) == {"strategy"}  # strategy|external|session: how it was measured
    table = markdown_table(ledger)
    assert "| peer-runai direct=0 (peer) |" in table and "| pread |" in table
    assert "peer-runai (peer)" in attempts_table(results) and "pread (peer)" not in attempts_table(results)
    with open(export_csv(ledger, tmp_path / "out")[0], newline="") as fh:
        rows = {row["label"]: row["strategy_kind"] for row in csv.DictReader(fh)}
    assert rows["pread"] == "strategy" and rows["peer-runai"] == "peer"


def test_a_gpu_only_peer_is_refused_on_host_before_anything_is_recorded(dtype_model, ledger, tmp_path):
    needs("peer-instanttensor")
    path = dtype_model("bf16").path
    with pytest.raises(StrategyUnavailable, match="loads to CUDA devices only; the host backend has none"):
        measure([RunConfig(path, "pread"), RunConfig(path, "peer-instanttensor")], runs=1, ledger=ledger,
                lock_dir=tmp_path / "locks")
    assert ledger.attempts().empty


def _script(room: str, name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / room / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peers_report_says_what_each_run_did(dtype_model, ledger, tmp_path):
    needs("peer-safetensors")
    path = dtype_model("bf16").path
    measure([RunConfig(path, "pread"), RunConfig(path, "peer-safetensors", {"framework": "numpy"})], runs=1,
            cache="warm", ledger=ledger, lock_dir=tmp_path / "locks")
    strategy_line, peer_line = _script("figures", "peers_report").attempt_lines(ledger)
    assert strategy_line.startswith("strategy pread") and peer_line.startswith("peer     peer-safetensors")
    assert "verified 1/1" in peer_line and "window imports none" in peer_line
    assert "safe_open(framework=numpy" in peer_line


def test_bench_load_measures_every_peer_both_ways_where_it_can_run(dtype_model, monkeypatch):
    import importlib

    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench")
    monkeypatch.syspath_prepend(benchmarks)
    bench = importlib.import_module("bench_load")
    for name in ("peer-safetensors", "peer-fastsafetensors", "peer-runai", "peer-instanttensor"):
        needs(name)
    specs, missing = bench.peer_specs(["peer-runai direct=0", "peer-runai concurrency=4"], dtype_model("bf16"), "host")
    assert specs == ["peer-safetensors", "peer-fastsafetensors", "peer-fastsafetensors direct=0", "peer-runai",
                     "peer-runai direct=0", "peer-runai concurrency=4"]
    assert missing == ["peer-instanttensor: instanttensor loads to CUDA devices only; the host backend has none"]
