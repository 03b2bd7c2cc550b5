"""``python -m workbench.measure.run.worker``: one JSON object out, clear failures."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _worker(config: object, *, raw: str | None = None) -> subprocess.CompletedProcess:
    text = raw if raw is not None else json.dumps(config)
    return subprocess.run([sys.executable, "-m", "workbench.measure.run.worker"], input=text, text=True,
                          capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("worker") / "moe.safetensors"
    write_synthetic(path, format="safetensors", layout="moe", size=512 << 10, experts=4)
    return str(path)


def test_worker_prints_one_json_result(model: str, isolated_cache: Path) -> None:
    proc = _worker({"file": model, "strategy": "mmap", "params": {}, "device": "host", "verify": True})
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    data = json.loads(line)
    from workbench.formats import open_index

    assert data["verified"] is True and data["verify"]["checked"] == data["verify"]["total"] > 0
    assert data["result"]["bytes"] == open_index(model).nbytes
    assert data["load_s"] >= data["index_s"] > 0 and data["init_s"] >= 0
    assert data["result"]["phases"]["index"] == data["index_s"]
    assert data["device_info"]["backend"] == "host" and 0 <= data["resident_after"] <= 1
    assert data["timings"]["window_imports"] == []  # nothing imported inside the timed window
    from workbench.records import WorkerReport

    report = WorkerReport.from_json(data)  # the spawner's side of the same message
    assert report.to_json() == data and report.verify.ok and report.load.bytes == data["result"]["bytes"]


def test_worker_without_verification(model: str, isolated_cache: Path) -> None:
    proc = _worker({"file": model, "strategy": "pread", "verify": False})
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["verified"] is None and data["verify"] is None


def test_worker_user_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    for config, text in (({"file": str(tmp_path / "nope.gguf"), "strategy": "pread"}, "nope.gguf"),
                         ({"file": "x", "strategy": "no-such"}, "unknown strategy"),
                         ({"strategy": "pread"}, "missing file")):
        proc = _worker(config)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and text in proc.stderr
    proc = _worker(None, raw="{not json")
    assert proc.returncode == 2 and "not JSON" in proc.stderr


def test_worker_bug_keeps_its_traceback(model: str) -> None:
    proc = _worker({"file": model, "strategy": "pread", "params": 5})
    assert proc.returncode == 1 and "Traceback" in proc.stderr and proc.stdout == ""
