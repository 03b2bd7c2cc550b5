"""Issue 35 §2's attack, measured: a ~90 KB ledger whose planted indexes make a merge evaluate
``hex(zeroblob(N))``, and a ledger with a ``-wal`` but no ``-shm``.

    PYTHONPATH=<checkout> python benchmarks/hardening/hostile_merge.py [--zeroblob 50000000] [--indexes 5]
                                                             [--timeout 120] [--json OUT]

Each case runs ``workbench ledger merge`` in a child process and reports its exit status, wall time,
peak RSS (``wait4``'s ``ru_maxrss``) and last line; run it with ``PYTHONPATH`` at another checkout to
measure "before". The attack (issue 35: ``zeroblob(450000000)``, five indexes, 6.6 GB) is kept small by
default on a shared machine; ``--zeroblob`` scales it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path


def plant_expression_indexes(path: Path, zeroblob: int, indexes: int) -> None:
    """Add to the workbench ledger at ``path`` a table ``evil`` and ``indexes`` indexes on
    ``hex(zeroblob(zeroblob))``, written as cheap indexes and rewritten by ``PRAGMA writable_schema``
    (so the file stays small: nothing of the expression was ever evaluated)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE evil (x)")
        conn.execute("INSERT INTO evil VALUES (1)")
        for k in range(indexes):
            conn.execute(f"CREATE INDEX evil_{k} ON evil (hex(zeroblob(1)), {k})")
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'zeroblob(1)', ?) WHERE type = 'index' "
                     "AND name LIKE 'evil_%'", (f"zeroblob({int(zeroblob)})",))
        conn.execute("PRAGMA writable_schema = OFF")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


def make_ledger(path: Path, host: str = "rig-b") -> None:
    """A small, valid workbench ledger at ``path``: one campaign, one finished attempt of another host."""
    from workbench.ledger import Ledger
    from workbench.records import RunConfig

    with Ledger(path) as led:
        attempt = led.start_attempt(campaign="c", config=RunConfig(file="/m.gguf", strategy="mmap"),
                                    cache="warm", host=host)
        led.set_verdict(attempt, "inconclusive")


def wal_without_shm(path: Path) -> None:
    """A ledger at ``path`` whose last rows are still in its ``-wal`` file, without its ``-shm`` (as a
    copy of a live ledger's pair of files arrives)."""
    work = Path(tempfile.mkdtemp(prefix="wal-"))
    try:
        live = work / "live.sqlite"
        make_ledger(live)
        conn = sqlite3.connect(live, isolation_level=None)
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("UPDATE campaigns SET description = 'in the wal'")
        shutil.copyfile(live, path)
        shutil.copyfile(f"{live}-wal", f"{path}-wal")
        conn.close()
    finally:
        shutil.rmtree(work)


def run_merge(local: Path, other: Path, timeout: float) -> dict:
    """``workbench ledger merge other`` into ``local`` in a child: exit, seconds, peak RSS, last line."""
    cmd = [sys.executable, "-m", "workbench.cli", "ledger", "--ledger", str(local), "merge", str(other)]
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.monotonic()
        # in the ledger's directory, not a checkout's: PYTHONPATH alone says which code runs
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=local.parent)
        cut = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout and not cut:
                proc.kill()  # cut, as the measurements were: the figure is a lower bound
                cut = True
            time.sleep(0.01)
        seconds = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        said = (out.read().strip().splitlines() or [""])[-1][:200]
    return {"code": _code_of(local.parent), "exit": proc.returncode, "cut_at_timeout_s": timeout if cut else None, "seconds": round(seconds, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "said": said}


def _code_of(cwd: Path) -> str:
    """Where the child's ``workbench`` package comes from."""
    return subprocess.run([sys.executable, "-c", "import workbench; print(workbench.__file__)"], cwd=cwd,
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zeroblob", type=int, default=50_000_000)
    ap.add_argument("--indexes", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="hostile-merge-"))
    try:
        local = root / "local.sqlite"
        make_ledger(local, host="rig-a")
        evil = root / "evil.sqlite"
        make_ledger(evil)
        plant_expression_indexes(evil, args.zeroblob, args.indexes)
        figures = {"machine": platform.node(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   "zeroblob": args.zeroblob, "indexes": args.indexes, "evil_bytes": evil.stat().st_size}
        figures["expression_indexes"] = run_merge(local, evil, args.timeout)
        walled = root / "walled" / "other.sqlite"
        walled.parent.mkdir()
        wal_without_shm(walled)
        figures["wal_without_shm"] = {**run_merge(local, walled, args.timeout),
                                      "beside_after": sorted(p.name for p in walled.parent.iterdir())}
    finally:
        shutil.rmtree(root)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return figures


if __name__ == "__main__":
    main()
