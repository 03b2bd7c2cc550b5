"""The device lock: two processes serialize; the wait is recorded; names normalize."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.measure.lock.device import DeviceLock, lock_name

HOLDER = """
import sys, time
from workbench.measure.lock.device import DeviceLock
with DeviceLock(sys.argv[1], sys.argv[2]) as lock:
    t0 = time.time()
    open(sys.argv[3] + ".held", "w").close()
    time.sleep(float(sys.argv[4]))
    t1 = time.time()
open(sys.argv[3], "w").write(f"{t0} {t1} {lock.waited_s}")
"""


def _hold(device: str, lock_dir: Path, out: Path, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLDER, device, str(lock_dir), str(out), str(seconds)])


def _wait_for(path: Path) -> None:
    for _ in range(400):
        if path.exists():
            return
        time.sleep(0.025)
    raise AssertionError(f"{path} never appeared")


def test_two_processes_serialize(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    first = _hold("cuda:0", tmp_path, a, 0.5)
    _wait_for(Path(f"{a}.held"))
    second = _hold("cuda", tmp_path, b, 0.0)  # "cuda" is "cuda:0": the same lock
    assert first.wait(30) == 0 and second.wait(30) == 0
    a0, a1, _ = map(float, a.read_text().split())
    b0, b1, b_wait = map(float, b.read_text().split())
    assert b0 >= a1  # the second held the device only after the first let go
    assert b_wait > 0


def test_other_devices_do_not_wait(tmp_path: Path) -> None:
    holder = _hold("cuda:0", tmp_path, tmp_path / "a", 30)
    try:
        _wait_for(tmp_path / "a.held")
        with DeviceLock("cuda:1", tmp_path, timeout_s=5):
            pass
        with pytest.raises(WorkbenchError, match="still locked"):
            DeviceLock("cuda:0", tmp_path, timeout_s=0.1).acquire()
    finally:
        holder.kill()
        holder.wait()
    with DeviceLock("cuda:0", tmp_path, timeout_s=5):  # a killed holder releases the lock
        pass


def test_lock_names() -> None:
    assert lock_name("cuda") == lock_name("cuda:0") != lock_name("cuda:1")
    assert lock_name("host") == lock_name("host-uma")
    assert "/" not in lock_name("hip:../../x")


def test_runner_records_the_lock_wait(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.formats.synth import write_synthetic
    from workbench.measure import RunConfig, measure

    model = tmp_path / "m.gguf"
    write_synthetic(model, format="gguf", layout="dense", size=256 << 10)
    holder = _hold("host", tmp_path / "locks", tmp_path / "h", 0.5)
    _wait_for(tmp_path / "h.held")
    (res,) = measure([RunConfig(str(model), "pread")], runs=1, cache="asis",
                     ledger=tmp_path / "l.sqlite", lock_dir=tmp_path / "locks")
    holder.wait(30)
    assert res.runs[0].ok and res.runs[0].lock_wait_s > 0
