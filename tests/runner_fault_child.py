"""Run by tests/test_faults_ledger.py in a fresh process: a runner that dies or loses its ledger mid-attempt.

    python tests/runner_fault_child.py HOW MODEL LEDGER LOCK_DIR

First one attempt is measured to the end (the "earlier attempt" that must stay intact), then a
second measurement of 3 runs is disturbed after its first run was recorded:

- ``kill``: the runner SIGKILLs itself (as the OOM killer or a power cut would end it);
- ``fsize``: RLIMIT_FSIZE drops to the ledger's write-ahead log size, so every later ledger write
  fails with EFBIG, as on a full disk (Python ignores SIGXFSZ, so the write fails rather than the
  process).

Prints one JSON object: {"earlier": ID, "error": str, "dump": path or null, "results": [...]}.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sys

from workbench.errors import UnrecordedResults
from workbench.ledger import Ledger
from workbench.measure import RunConfig, measure


def main(how: str, model: str, ledger_path: str, locks: str) -> int:
    ledger = Ledger(ledger_path)
    (earlier,) = measure([RunConfig(model, "pread")], runs=1, cache="asis", ledger=ledger,
                         campaign="earlier", lock_dir=locks)

    def disturb(done: int, total: int, config: RunConfig, run: object) -> None:
        if done != 1:
            return
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        wal = os.path.getsize(ledger_path + "-wal")
        resource.setrlimit(resource.RLIMIT_FSIZE, (wal, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    out = {"earlier": earlier.attempt_id, "error": None, "dump": None, "results": []}
    try:
        results = measure([RunConfig(model, "mmap")], runs=3, cache="asis", ledger=ledger,
                          campaign="disturbed", lock_dir=locks, progress=disturb)
        out["results"] = [r.to_json() for r in results]
    except UnrecordedResults as exc:
        out.update(error=str(exc), dump=exc.dump, results=[r.to_json() for r in exc.results])
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
