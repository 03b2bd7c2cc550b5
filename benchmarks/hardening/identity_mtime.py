"""Issue 35 §4's attack, measured: a model hashed by ``inspect``, its last 4 KiB rewritten in place and
its mtime put back with ``os.utime``; what ``inspect`` shows and what ``run`` records then.

    PYTHONPATH=<checkout> python benchmarks/hardening/identity_mtime.py

Runs ``workbench`` in child processes (in a scratch directory, so ``PYTHONPATH`` says which code runs)
with a fresh identity cache; prints one JSON object: the bytes' hash, the hash each step showed or
recorded, and the run's ``verified``.
"""
from __future__ import annotations

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

import xxhash


def wb(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(root / "cache"), "WORKBENCH_LOCK_DIR": str(root / "locks")}
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          env=env, cwd=root, timeout=300)


def main() -> dict:
    root = Path(tempfile.mkdtemp(prefix="identity-mtime-"))
    try:
        model, ledger = root / "m.safetensors", root / "l.sqlite"
        assert wb(root, "synth", str(model), "--format", "safetensors", "--size", "4MiB").returncode == 0
        time.sleep(1.5)  # an old file, as a downloaded model is: its hash may be cached
        first = json.loads(wb(root, "inspect", str(model), "--json").stdout)["hash"]
        st = os.stat(model)
        time.sleep(0.05)
        with open(model, "r+b") as fh:
            fh.seek(st.st_size - 4096)
            fh.write(os.urandom(4096))
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
        now = "xxh3_128:" + xxhash.xxh3_128(model.read_bytes()).hexdigest()
        shown = json.loads(wb(root, "inspect", str(model), "--json").stdout)["hash"]
        ran = wb(root, "run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "asis",
                 "--ledger", str(ledger))
        with sqlite3.connect(ledger) as conn:
            recorded = conn.execute("SELECT file_hash FROM attempts").fetchone()[0]
            verified = [r[0] for r in conn.execute("SELECT verified FROM runs")]
        code = subprocess.run([sys.executable, "-c", "import workbench; print(workbench.__file__)"], cwd=root,
                              capture_output=True, text=True).stdout.strip()
        figures = {"machine": platform.node(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   "code": code, "first_inspect": first, "bytes_now": now, "inspect_after": shown,
                   "inspect_after_is_stale": shown == first, "run_exit": ran.returncode,
                   "run_recorded": recorded, "run_recorded_is_stale": recorded == first, "verified": verified}
    finally:
        shutil.rmtree(root)
    print(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
