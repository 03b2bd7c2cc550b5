"""Issue 24 §3, the makers outside the runner: the I/O probes' files in a model's directory
(``.wb-evict-*``, ``.wb-odirect-*``) and the Run:ai peer's log in the temporary directory. Each is
made by a real process SIGKILLed between its create and its unlink; the next probe of that kind in that
directory removes it, and leaves a live owner's file, another host's file, a look-alike name and a
link under our name alone."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from workbench.output import owned

# maker → (prefix, suffix, code run in the child to reach the point between create and unlink,
#          the next probe, run in the test's own process)
_HOLD = "def hold(path, *a, **k):\n    print(path, flush=True); time.sleep(300)\n"
MAKERS = {
    "evict": (".wb-evict-", "", _HOLD + textwrap.dedent("""
        from workbench.io import envinfo, pagecache
        pagecache.warm_file = hold
        envinfo.eviction_support(DIR)
    """)),
    "odirect": (".wb-odirect-", "", _HOLD + textwrap.dedent("""
        from workbench.io import direct
        direct._try_direct_read = hold
        direct.direct_io_support(DIR)
    """)),
    "runai": ("workbench-runai-", ".log", _HOLD + textwrap.dedent("""
        from workbench.strategies.peers.runai_peer import RunaiPeerStrategy
        hold(object.__new__(RunaiPeerStrategy).log_path())
    """)),
}


def _probe(kind: str, directory: Path) -> None:
    if kind == "evict":
        from workbench.io.envinfo import eviction_support
        eviction_support(directory)
    elif kind == "odirect":
        from workbench.io.direct import direct_io_support
        direct_io_support(directory)
    else:
        from workbench.strategies.peers.runai_peer import RunaiPeerStrategy
        os.unlink(object.__new__(RunaiPeerStrategy).log_path())  # what the run's cleanup does


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_probe_killed_between_create_and_unlink_leaves_a_file_the_next_probe_removes(kind, tmp_path,
                                                                                      monkeypatch):
    prefix, suffix, code = MAKERS[kind]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the runai log's directory, here
    proc = subprocess.Popen([sys.executable, "-c", f"import time\nDIR = {str(tmp_path)!r}\n{code}"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        left = proc.stdout.readline().strip()
        assert left and os.path.isfile(left), proc.wait()
    finally:
        proc.kill()
        proc.wait()
    assert os.path.isfile(left)  # what the SIGKILL leaves
    host, boot = owned._tags()
    me = os.getpid()
    ticks = owned.start_ticks(me)
    dead = _dead_pid()
    other_boot = tmp_path / f"{prefix}{me}-{ticks}-{host}-{'0' * 8 if boot != '0' * 8 else '1' * 8}-abcdef{suffix}"
    old_style = tmp_path / f"{prefix}{dead}-12345-abcdef{suffix}"  # before the tags: this host's, dead
    kept = [
        tmp_path / owned.owned_name(prefix, suffix),  # a live owner's (this process)
        tmp_path / f"{prefix}{dead}-1-{'f' * 8 if host != 'f' * 8 else 'e' * 8}-{boot}-abcdef{suffix}",  # another host
        tmp_path / f"{prefix}{dead}-1-abcdef{suffix}.bak",  # look-alikes, not our pattern
        tmp_path / f"{prefix}notes{suffix}",
        tmp_path / f"x{prefix}{dead}-1-abcdef{suffix}",
    ]
    for path in (other_boot, old_style, *kept):
        path.write_bytes(b"x")
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    link = tmp_path / f"{prefix}{dead}-2-abcdef{suffix}"  # a link under a dead owner's name
    link.symlink_to(target)
    sub = tmp_path / f"{prefix}{dead}-3-abcdef{suffix}"  # a directory under one
    sub.mkdir()

    _probe(kind, tmp_path)

    assert not os.path.exists(left) and not other_boot.exists() and not old_style.exists()
    assert all(p.exists() for p in kept), [p.name for p in kept if not p.exists()]
    assert link.is_symlink() and target.read_bytes() == b"keep" and sub.is_dir()
    mine = [n for n in os.listdir(tmp_path) if n.startswith(prefix)]
    assert sorted(mine) == sorted(p.name for p in (*kept[:2], *kept[2:4], link, sub))  # the probe's own is gone
