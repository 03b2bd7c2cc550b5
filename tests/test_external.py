"""External engine mode: clock stops at the marker, the process group dies, failures are clear."""
from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from workbench.errors import ParamError
from workbench.measure.external import measure_external, time_external


def _py(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_marker_stops_the_clock_and_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # A child that would outlive its parent, then a marker printed without flush (the pty line-buffers).
    code = ("import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(0.2); "
            "print('loading'); print('llama threadpool init: done'); time.sleep(60)")
    out = time_external(_py(code), r"threadpool init", timeout_s=30, nbytes=123)
    assert out.error is None and out.load_s is not None and out.bytes == 123
    assert out.report.external.marker_line == "llama threadpool init: done"
    assert out.wall_s >= out.load_s and out.wall_s < 30  # killed at the marker, not after 60 s
    child = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(child):
            break
        time.sleep(0.02)
    assert not _alive(child)


def test_marker_never_printed_times_out() -> None:
    out = time_external(_py("import time; print('still loading', flush=True); time.sleep(60)"),
                        r"loaded", timeout_s=0.5)
    assert out.load_s is None and "timed out" in out.error and "still loading" in out.error


def test_early_exit_before_the_marker() -> None:
    out = time_external(_py("import sys; print('oops: no model'); sys.exit(3)"), r"loaded", timeout_s=30)
    assert out.load_s is None and "exited with code 3" in out.error and "oops: no model" in out.error


def test_bad_marker_is_a_param_error(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="marker"):
        time_external("true", "(unclosed", timeout_s=1)


def test_external_attempt_is_recorded_like_any_other(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.ledger import Ledger

    model = tmp_path / "model.bin"
    model.write_bytes(os.urandom(64 << 10))
    ledger = Ledger(tmp_path / "l.sqlite")
    res = measure_external(_py("print('{\"type\":\"loaded\"}')"), r'"type":"loaded"', str(model), runs=2,
                           cache="warm", timeout_s=30, ledger=ledger, campaign="ext",
                           lock_dir=tmp_path / "locks", label="engine")
    assert res.config.strategy == "external" and res.config.params["marker"] == '"type":"loaded"'
    assert res.stats.n == 2 and res.verdict == "baseline" and res.label == "engine"
    assert all(r.cache_reached and r.resident_before >= 0.98 for r in res.runs)
    assert res.runs[0].bytes == 64 << 10 and res.runs[0].pid != res.runs[1].pid
    assert len(ledger.runs(res.attempt_id)) == 2
    assert ledger.attempt(res.attempt_id)["strategy"] == "external"
