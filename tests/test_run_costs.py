"""What a run cost besides time (bytes read, CPU, switches, memory), measured by the worker and stored,
and the small things: strategies without torch, wrapped tables, plurals, ignored checkpoints, the
GPU session's step limits."""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.cli.notebooks.actions import ensure_model
from workbench.ledger import Ledger
from workbench.measure.run.spawn import model_files, run_worker
from workbench.measure.run.tables import format_table
from workbench.records import COST_FIELDS, RunConfig, RunCosts, WorkerReport, plural
from workbench.upload.host import HostDevice

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return ensure_model(tmp_path_factory.mktemp("costs") / "m.gguf", layout="dense", format="gguf", size=4 * MiB)


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def test_a_worker_reports_what_its_load_cost(model):
    from workbench.io.pagecache import prepare

    prepare(model, "warm")
    out = run_worker(RunConfig(file=str(model), strategy="pread"))
    costs = out.report.costs
    size = os.path.getsize(model)
    assert costs.process_rchar_bytes >= out.bytes  # every tensor byte went through a read call
    assert costs.page_cache_before_bytes == costs.page_cache_after_bytes == size  # warm, and kept
    assert costs.user_s + costs.system_s > 0 and costs.voluntary_switches >= 0 <= costs.involuntary_switches
    assert costs.peak_rss_bytes >= costs.rss_before_bytes > 0
    assert costs.device_bytes_source == "allocations" and costs.device_extra_bytes >= 0
    assert costs.pinned_peak_bytes == costs.registered_peak_bytes == 0  # pread copies from the heap
    if costs.disk_read_bytes is None:  # a tmpfs /tmp: said why
        assert "no block device" in costs.unknown["disk_read_bytes"]
    evicted = run_worker(RunConfig(file=str(model), strategy="pread", params={"evict": "1"})).report.costs
    assert evicted.page_cache_after_bytes < size // 2  # DONTNEED after each read


def test_staging_shows_as_page_locked_memory_at_its_peak(model):
    costs = run_worker(RunConfig(file=str(model), strategy="lanes", params={"upload": "pinned"})).report.costs
    assert costs.pinned_peak_bytes + costs.registered_peak_bytes > 0


def test_the_locked_meter_keeps_the_peak_after_a_free():
    with HostDevice() as device:
        a = device.alloc_pinned(1 * MiB)
        b = device.alloc_pinned(2 * MiB)
        device.free_pinned(a)
        assert device.locked.now["pinned"] == 2 * MiB and device.locked.peak["pinned"] == 3 * MiB
        device.locked.reset()
        assert device.locked.peak["pinned"] == 2 * MiB
        device.free_pinned(b)


def test_costs_round_trip_and_older_reports_have_none():
    costs = RunCosts(process_read_bytes=1, disk_read_bytes=None, disk_devices=("vda (254:0)",),
                     unknown={"disk_read_bytes": "tmpfs"})
    report = WorkerReport.from_json({"result": {}, "load_s": 0.1, "costs": costs.to_json()})
    assert report.costs == costs
    assert WorkerReport.from_json({"result": {}, "load_s": 0.1}).costs is None
    assert "costs" not in WorkerReport.from_json({"result": {}, "load_s": 0.1}).to_json()


def test_the_runner_names_the_models_files_and_the_ledger_exports_the_costs(model, tmp_path):
    assert model_files(str(model)) == [str(model)]
    assert model_files(str(tmp_path / "nope.gguf")) == []
    ledger = tmp_path / "l.sqlite"
    done = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "2", "--cache", "warm",
                                     "--ledger", str(ledger)])
    assert done.exit_code == 0, done.output
    out = CliRunner().invoke(main, ["ledger", "export", "--ledger", str(ledger), "--csv", str(tmp_path / "x")])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader((tmp_path / "x" / "runs.csv").open(newline="")))
    assert len(rows) == 2 and set(COST_FIELDS) <= set(rows[0])
    assert all(int(r["process_rchar_bytes"]) >= int(r["bytes"]) for r in rows)
    with Ledger(ledger) as led:
        environment = led.attempts()["environment"].iloc[0]
    assert environment["settings"]["fs_type"] and "read_ahead_kb" in environment["settings"]


# -- small things --------------------------------------------------------------------------------------


def test_strategies_lists_availability_without_importing_torch():
    code = ("import sys; from workbench.cli.commands.strategies import describe_strategies; "
            "infos = {i['name']: i for i in describe_strategies('host')}; "
            "print(sorted(m for m in ('torch', 'fastsafetensors', 'instanttensor', 'runai_model_streamer') "
            "if m in sys.modules)); print(infos['peer-instanttensor']['available'], "
            "infos['peer-instanttensor']['reason'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    imported, instant = out.splitlines()
    assert imported == "[]"
    assert instant.startswith("False") and ("CUDA devices only" in instant or "not installed" in instant)


def test_strategies_on_cuda_lists_an_installed_gpu_only_peer_as_available():
    from importlib import metadata

    from workbench.cli.commands.strategies import describe_strategy

    try:
        metadata.version("instanttensor"), metadata.version("torch")
    except metadata.PackageNotFoundError:
        info = describe_strategy("peer-instanttensor", "cuda")
        assert not info["available"] and "not installed" in info["reason"]
        return
    assert describe_strategy("peer-instanttensor", "cuda")["available"]


def test_the_engaged_column_wraps_to_the_width_and_loses_nothing():
    engaged = "zero_copy: 3/3 tensors — ON; blob_zero_copy: 46/48 blobs — PARTIAL (2 not contiguous)"
    text = format_table(("attempt", "verdict", "engaged"), [["abcd1234", "faster", engaged]], width=60)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines) and len(lines) > 3
    assert " ".join(line[len("abcd1234  faster   "):].strip() for line in lines[2:]) == engaged


def test_plurals():
    assert [plural(n, "attempt") for n in (0, 1, 2)] == ["0 attempts", "1 attempt", "2 attempts"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def test_notebook_checkpoints_are_ignored():
    assert ".ipynb_checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_gpu_session_limits_hold_the_engine_ab_and_say_their_total(tmp_path):
    script = (ROOT / "benchmarks" / "gpu" / "gpu_session.sh").read_text()
    limits = {k: int(v) for k, v in re.findall(r"\[([a-z-]+)\]=(\d+)", script)}
    # 10 fresh processes importing torch + transformers took 20 s each on a fresh H200 box: 1.5× margin
    assert limits["engine-ab"] >= 10 * 20 * 1.5
    steps = set(re.findall(r"^    ([a-z-]+)\)", script, re.M))  # the case labels: every step the script runs
    assert set(limits) == steps and "sharded-warm" in steps  # each step has its limit in LIMIT
    assert all(limit <= 600 for limit in limits.values())  # one device command's most
    steps = ["bogus", *limits]  # the unknown step first: the script stops there, having run nothing
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "gpu_session.sh"), str(tmp_path / "out"), *steps],
                          capture_output=True, text=True, timeout=60)
    total = sum(limits.values())
    assert done.returncode == 2 and f"— {total} s of limits in all" in done.stdout
    assert ("more than one lease holds" in done.stderr) == (total > 1740)
