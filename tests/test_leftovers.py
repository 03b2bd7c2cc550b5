"""Issue 24 §3: what a run makes outside the ledger dies with it, or the next start removes it.

Each kind is made by a real run that is then SIGKILLed: a session's memory cgroup (the next start
removes it), a locked balloon (the kernel frees it with the process), a swap file (its guard turns it
off and deletes it; if the guard dies too, the next start does), scratch files (the next start in
that directory removes those of runners gone), the device lock (the kernel drops the flock)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from process_helpers import alive, wait_for

from workbench.errors import ParamError
from workbench.measure.session import cgroups
from workbench.measure.session.pressure import MemoryPressure

MiB = 1 << 20


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def _parent_v1() -> str:
    try:
        with MemoryPressure(64, "cgroup") as p:
            return os.path.dirname(p.limit.path)
    except ParamError as exc:
        pytest.skip(f"no memory cgroup can be made here: {exc}")


def _session_cgroups(parent: str) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith(cgroups.PREFIX))


def _child(code: str, tmp_path: Path) -> subprocess.Popen:
    """A python child running ``code`` that prints one line when it holds what it made."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "WORKBENCH_LOCK_DIR": str(tmp_path / "locks")})


def test_a_session_killed_under_a_limit_leaves_a_cgroup_the_next_start_removes(synth_model, tmp_path):
    parent = _parent_v1()
    before = _session_cgroups(parent)
    model = synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=64)
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "session", model.path, "--turns", "500",
                             "--tokens", "4", "--compute", "sleep:20", "--cache-mib", "1", "--memory-limit", "512",
                             "--ledger", str(tmp_path / "l.sqlite"), "--timeout", "300"],
                            env={**os.environ, "WORKBENCH_LOCK_DIR": str(tmp_path / "locks")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # this runner's cgroups only (named by its pid): another xdist worker's session test may make and
    # remove its own under the same parent meanwhile
    ours = f"{cgroups.PREFIX}{proc.pid}-"
    try:
        made = lambda: [n for n in _session_cgroups(parent) if n not in before and n.startswith(ours)]  # noqa: E731
        wait_for(lambda: any(open(os.path.join(parent, n, "cgroup.procs")).read().strip() for n in made()), 60,
                 lambda: f"no session worker joined its cgroup (runner exit code: {proc.poll()})")
    finally:
        proc.kill()
        _, err = proc.communicate()
    left = made()
    wait_for(lambda: not any(open(os.path.join(parent, n, "cgroup.procs")).read().strip() for n in left), 10,
             "the worker outlived its runner")
    assert len(left) == 1, (left, err[-2000:])  # what the kill leaves: the cgroup, still charged
    with MemoryPressure(64, "cgroup") as p:  # the next start
        removed = re.search(r"removed (\d+) stale cgroup\(s\) of runners gone", p.limit.detail)
        assert removed and int(removed.group(1)) >= 1, p.limit.detail  # ours, and any other runner's gone
    assert made() == []


def test_a_live_runners_cgroup_is_never_removed(tmp_path):
    parent = _parent_v1()
    from workbench.ledger.owner import current_owner

    me = current_owner()
    mine = os.path.join(parent, f"{cgroups.PREFIX}{me.pid}-{me.start_ticks}-abcdef")
    reused = os.path.join(parent, f"{cgroups.PREFIX}{me.pid}-{me.start_ticks + 1}-abcdef")  # same pid, another process
    old = os.path.join(parent, f"{cgroups.PREFIX}{os.getppid()}-abcdef")  # an older name, its pid alive
    for path in (mine, reused, old):
        os.mkdir(path)
    try:
        reaped = cgroups.reap_stale(parent)
        assert reused in reaped and mine not in reaped and old not in reaped
        assert os.path.isdir(mine) and os.path.isdir(old) and not os.path.exists(reused)
    finally:
        for path in (mine, reused, old):
            cgroups.remove_cgroup(path)


def _mlocked() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("Mlocked:"))


def test_a_balloon_dies_with_the_run_that_holds_it(tmp_path):
    proc = _child("""
        from workbench.measure.session.balloon import Balloon
        b = Balloon(256 << 20).inflate()
        print("held", flush=True)
        import time; time.sleep(300)
    """, tmp_path)
    try:
        assert proc.stdout.readline().strip() == "held"
        held = _mlocked()
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: _mlocked() <= held - 200 * MiB, 10, lambda: f"Mlocked still {_mlocked() / MiB:.0f} MiB")


def _swap_or_skip(tmp_path: Path):
    from workbench.measure.session.swap import SwapFile, SwapUnavailable

    try:
        with SwapFile(tmp_path, 16):
            pass
    except SwapUnavailable as exc:
        pytest.skip(f"swap cannot be turned on here: {exc}")


def test_a_swap_file_is_off_and_gone_when_its_run_is_killed(tmp_path):
    from workbench.measure.session.swap import enabled

    _swap_or_skip(tmp_path)
    proc = _child(f"""
        from workbench.measure.session.swap import SwapFile
        s = SwapFile({str(tmp_path)!r}, 16).__enter__()
        print(s.path, flush=True)
        import time; time.sleep(300)
    """, tmp_path)
    try:
        path = proc.stdout.readline().strip()
        assert path in enabled()
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: path not in enabled() and not os.path.exists(path), 10, "the swap file outlived its run")


def test_a_swap_file_whose_guard_died_too_is_removed_by_the_next_start(tmp_path):
    from workbench.measure.lock.reaper import descendants
    from workbench.measure.session.swap import SwapFile, enabled

    _swap_or_skip(tmp_path)
    proc = _child(f"""
        from workbench.measure.session.swap import SwapFile
        s = SwapFile({str(tmp_path)!r}, 16).__enter__()
        print(s.path, flush=True)
        import time; time.sleep(300)
    """, tmp_path)
    try:
        path = proc.stdout.readline().strip()
        guards = descendants(proc.pid)
        for pid in guards:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(alive(p) for p in guards), 10, "the guard lives")
    finally:
        proc.kill()
        proc.wait()
    assert path in enabled() and os.path.exists(path)  # nothing could turn it off
    with SwapFile(tmp_path, 16) as nxt:
        assert nxt.reaped == (path,)
    assert path not in enabled() and not os.path.exists(path)


@pytest.mark.parametrize("kind", ["ceilings", "h2d"])
def test_a_scratch_file_left_by_a_killed_run_is_removed_by_the_next_start(tmp_path, kind):
    """The ceilings' scratch file (up to 512 MiB beside the model) and h2d's: a run SIGKILLed while it
    holds one leaves it; the next run in that directory removes it, and leaves a live run's alone."""
    from workbench.measure.lock.scratch import make_scratch

    module = "walls" if kind == "ceilings" else "h2d"
    proc = _child(f"""
        from workbench.measure.ceilings.{module} import _write_scratch
        print(_write_scratch({str(tmp_path)!r}, 1 << 20), flush=True)
        import time; time.sleep(300)
    """, tmp_path)
    try:
        path = proc.stdout.readline().strip()
        assert os.path.exists(path)
        fd, live = make_scratch(tmp_path, kind)  # a run beside it, alive: its file stays
        os.close(fd)
    finally:
        proc.kill()
        proc.wait()
    assert os.path.exists(path)  # what the kill leaves
    fd, mine = make_scratch(tmp_path, kind)  # the next start
    os.close(fd)
    assert not os.path.exists(path) and os.path.exists(live) and os.path.exists(mine)


def test_a_device_lock_held_by_a_killed_run_is_free_at_once(tmp_path):
    """The lock is an flock: the kernel drops it with its holder. Its file stays, by design: it is the
    lock's name, and the next run takes it over (and writes its own owner line)."""
    from workbench.measure.lock.device import DeviceLock

    lock_dir = tmp_path / "devlocks"
    proc = _child(f"""
        from workbench.measure.lock.device import DeviceLock
        lock = DeviceLock("host", {str(lock_dir)!r}, timeout_s=5)
        lock.__enter__()
        print("held", flush=True)
        import time; time.sleep(300)
    """, tmp_path)
    try:
        assert proc.stdout.readline().strip() == "held"
        files = sorted(os.listdir(lock_dir))
    finally:
        proc.kill()
        proc.wait()
    # at once: one try (a timeout of 0), which a lock still held fails; no wall-clock bound to trip on a
    # loaded box (was: taken within 1 s under a 2 s timeout)
    with DeviceLock("host", lock_dir, timeout_s=0):
        assert sorted(os.listdir(lock_dir)) == files  # no new file, none left over beside the lock's own
