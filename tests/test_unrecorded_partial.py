"""An unrecorded dump (measure/run/unrecorded.py) is never seen half-written under its final name: a run
killed in the dump's own write leaves only an owner-named partial, which the next dump there removes."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from workbench.measure.run.unrecorded import save_unrecorded

CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from workbench.measure.run.unrecorded import save_unrecorded

    os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed after the write, before the sync
    save_unrecorded(Path(sys.argv[1]), {"attempts": ["x" * 100000]})
""")


def dumps(directory: Path) -> list[Path]:
    return sorted(directory.glob("workbench-unrecorded-*.json"))


def test_a_dump_killed_in_its_write_leaves_no_dump_and_the_next_one_reaps_its_partial(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    child = subprocess.run([sys.executable, "-c", CHILD, str(ledger)], capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert dumps(tmp_path) == []  # no file under a dump's name that import-unrecorded would take
    partials = sorted(tmp_path.glob(".workbench-unrecorded-*.partial"))
    assert len(partials) == 1  # what the killed write left, named after its dead owner
    payload = {"attempts": [{"label": "kept"}], "cause": "disk full"}
    path = save_unrecorded(ledger, payload)
    assert path is not None and path.parent == tmp_path and dumps(tmp_path) == [path]
    assert json.loads(path.read_text()) == payload and oct(path.stat().st_mode & 0o777) == "0o644"
    assert not list(tmp_path.glob(".workbench-unrecorded-*"))  # the dead partial reaped, ours renamed


def test_a_dump_never_replaces_one_of_the_same_name(tmp_path: Path, monkeypatch) -> None:
    import workbench.measure.run.unrecorded as unrecorded

    monkeypatch.setattr(unrecorded.time, "strftime", lambda fmt, t: "20261203T000000")
    first = save_unrecorded(tmp_path / "ledger.sqlite", {"n": 1})
    second = save_unrecorded(tmp_path / "ledger.sqlite", {"n": 2})  # same second, same pid: the next directory
    assert first is not None and json.loads(first.read_text()) == {"n": 1}
    assert second is None or second.parent != tmp_path
    if second is not None:
        second.unlink()
    assert not list(tmp_path.glob(".workbench-unrecorded-*"))
