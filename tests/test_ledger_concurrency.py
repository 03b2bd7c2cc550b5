"""Several processes recording into one ledger at once lose nothing."""
from __future__ import annotations

import multiprocessing

from ledger_helpers import make_run
from workbench.ledger import Ledger
from workbench.records import RunConfig

RUNS_EACH = 200


def _write_runs(path: str, strategy: str, start, done) -> None:
    led = Ledger(path)
    attempt_id = led.start_attempt(campaign="shared", config=RunConfig("/m.gguf", strategy), cache="warm",
                                   file_identity=None, environment=None, device_info=None)
    start.wait()  # both writers begin together, so their transactions really interleave
    for i in range(RUNS_EACH):
        led.add_run(attempt_id, make_run(i, 0.001 * (i + 1), pid=i))
    led.close()
    done.put(attempt_id)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "l.sqlite")
    ctx = multiprocessing.get_context("spawn")
    start, done = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_write_runs, args=(path, s, start, done)) for s in ("pread", "mmap")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    ids = {done.get(timeout=5), done.get(timeout=5)}
    with Ledger(path) as led:
        runs = led.runs(campaign="shared")
        assert len(runs) == 2 * RUNS_EACH
        assert runs["id"].is_unique
        for attempt_id in ids:
            mine = led.runs(attempt_id)
            assert sorted(mine["position"]) == list(range(RUNS_EACH))
            assert sorted(mine["load_s"].round(6)) == [round(0.001 * (i + 1), 6) for i in range(RUNS_EACH)]
        assert len(led.campaigns()) == 1  # both created "shared" at once: one campaign, not two
