"""Issue 35 §6: a ``lanes`` or ``ring`` load can fail; it can never hang.

The long stress is ``benchmarks/hardening/stress_lanes_ring.py`` (docs/hardening/README.md, "Hardening IV"); here
a short run of it (a failure injected at a random call of a random point of every variant, beside a busy
process, hand-backs that keep the GIL so waiters are woken late and robbed), and the bound on every join:
a thread that ignores its stop fails the load in one line, naming where it is, instead of hanging it.
Each case runs in a child process with a timeout, so a hang fails the test instead of stalling the suite.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STRESS = ROOT / "benchmarks" / "hardening" / "stress_lanes_ring.py"


def test_failures_injected_at_every_point_of_lanes_and_ring_loads_never_hang(tmp_path):
    out = tmp_path / "stress.json"
    proc = subprocess.run([sys.executable, str(STRESS), "--loads", "50", "--busy", "1", "--hang-s", "20",
                           "--jitter", "0.3", "--seed", "35", "--json", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, f"exit {proc.returncode} (1: a load hung; its stacks):\n{proc.stderr[-6000:]}"
    figures = json.loads(out.read_text())
    assert figures["loads"] == 50 and figures["injected"] + figures["finished"] == 50
    assert figures["injected"] >= 45 and figures["other"] == [] and figures["left_threads"] == []


STUCK = textwrap.dedent("""
    import sys, threading, time
    from workbench.formats.synth import write_synthetic
    from workbench.strategies import get_strategy, lanes, ring_readers
    from workbench.upload import joins, open_device

    joins.STOP_GRACE_S = 0.5
    index = write_synthetic(sys.argv[1], format="safetensors", layout="dense", size=4 << 20)
    never = threading.Event()
    real = lanes.pread_into
    calls = []

    def pread_that_hangs_once(*args):  # the first read never returns, whatever stop says
        calls.append(1)
        if len(calls) == 2:
            never.wait()
        return real(*args)

    lanes.pread_into = ring_readers.pread_into = pread_that_hangs_once
    params = {"threads": 2, "chunk_mib": 1} if sys.argv[2] == "lanes" else {"slot_mib": 1, "threads": 2, "direct": "off", "gate": 0.0, "fit": False}

    class Boom(RuntimeError):
        pass

    with open_device("host") as device:
        def failing_copy(*a, **k):  # once the second read hangs: the load fails with a thread stuck
            deadline = time.monotonic() + 10
            while len(calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            raise Boom("copy refused on purpose")
        device.copy_h2d = failing_copy
        t0 = time.monotonic()
        try:
            get_strategy(sys.argv[2])(**params).load(index, device)
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}")
        print(f"after {time.monotonic() - t0:.1f} s")
""")


@pytest.mark.parametrize("strategy", ["lanes", "ring"])
def test_a_thread_that_ignores_its_stop_fails_the_load_in_one_line_instead_of_hanging(tmp_path, strategy):
    proc = subprocess.run([sys.executable, "-c", STUCK, str(tmp_path / "m.safetensors"), strategy],
                          capture_output=True, text=True, timeout=60)
    said = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert said[0].startswith("ThreadsStuck: ") and "still running 0.5 s after being told to stop" in said[0], said
    assert "pread_that_hangs_once" in said[0] and "copy refused on purpose" in said[0], said
    assert float(said[1].split()[1]) < 20
