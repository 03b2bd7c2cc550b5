"""lane_handoff="lock": jobs reach the lanes over one queue and come back by a bare lock a job, not the
standard library's futures. What lands is unchanged — every slice read back against the file over
several layouts, schedules, batched runs and a predictor's staging (the paths that wait, poll and hand
plain jobs to the lanes) — the session decides alike, a job's exception reaches its waiter, and closing
ends every lane."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from device_fakes import DeferredCopyDevice
from moe_layouts import three_layouts

from workbench.errors import ParamError
from workbench.expert.lanes import Handoff, LanePool, LockLanes
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig, check_config
from workbench.measure.session.ab import parse_ab
from workbench.measure.session.runner import session_label
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return three_layouts(tmp_path_factory.mktemp("handoff"), seed=21)


def _run(index, device, **kw):
    slices = [n for b in index.blobs for _, n in b.slices]
    base = dict(turns=3, tokens=3, experts_per_token=2, distribution="zipf", lanes=3, overlap=True,
                cache_mib=max(sum(slices) / 3, 30 * -(-max(slices) // 4096) * 4096) / 2**20, verify=True,
                verify_end=True)
    with ExpertSession(index, device, SessionConfig(**{**base, **kw})) as s:
        assert isinstance(s.lanes._pool, LockLanes if kw.get("lane_handoff") == "lock" else ThreadPoolExecutor)
        records = list(s.turns())
        s.finish_checks()
        return records, s.verified_slices


PATHS = {
    "landed": {},
    "eager pool": dict(schedule="eager", placement="pool"),
    "batched": dict(batch_misses=True),  # the lanes' plain jobs (submit_plain) and their runs
    "predictor": dict(prefetch="oracle:precision=0.8,recall=0.8"),  # the stage polls done() on its handles
}


@pytest.mark.parametrize("model", ["page", "odd", "gguf-py"])
@pytest.mark.parametrize("path", list(PATHS))
def test_every_slice_lands_the_files_bytes(models, model, path):
    records, verified = _run(models[model], DeferredCopyDevice(), lane_handoff="lock", **PATHS[path])
    assert sum(r.misses for r in records) > 0 and sum(r.hits for r in records) > 0
    assert verified >= sum(r.hits + r.misses for r in records)  # a wrong byte raised VerificationError


@pytest.mark.parametrize("path", ["landed", "eager pool"])
def test_the_session_decides_as_under_the_executor(models, path):
    decided = {}
    for handoff in ("executor", "lock"):
        records, _ = _run(models["odd"], HostDevice(), lane_handoff=handoff, turns=4, **PATHS[path])
        decided[handoff] = [(r.hits, r.misses, r.evictions, r.bytes_read, r.landed_bytes) for r in records]
    assert decided["lock"] == decided["executor"]


def test_a_jobs_exception_reaches_its_waiter_and_the_lanes_go_on():
    pool = LanePool(2, handoff="lock")
    try:
        def boom(_reader):
            raise OSError(5, "the disk said no")
        bad = pool.submit(boom, "pread", __file__)
        with pytest.raises(OSError, match="the disk said no"):
            pool.wait(bad)
        good = pool.submit(lambda _reader: 7, "pread", __file__)
        assert isinstance(good, Handoff) and pool.wait(good) == 7 and good.done()
    finally:
        pool.close()


def test_a_handle_is_not_done_until_its_job_is_and_waiters_block_until_then():
    pool = LanePool(1, handoff="lock")
    gate = threading.Event()
    try:
        handle = pool.submit_plain(lambda: (gate.wait(5), "landed")[1])
        time.sleep(0.05)
        assert not handle.done()
        got: list[str] = []
        waiter = threading.Thread(target=lambda: got.append(pool.wait(handle)))
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive() and not got  # still waiting for the job
        gate.set()
        waiter.join(5)
        assert got == ["landed"] and handle.done()
    finally:
        gate.set()
        pool.close()


def test_closing_runs_what_was_queued_and_ends_every_lane():
    pool = LanePool(3, handoff="lock")
    ran: list[int] = []
    handles = [pool.submit_plain(lambda n=n: (time.sleep(0.01), ran.append(n))) for n in range(12)]
    pool.close()
    assert sorted(ran) == list(range(12)) and all(h.done() for h in handles)
    assert not [t for t in threading.enumerate() if t.name.startswith("wb-lane_")]


def test_an_unknown_handoff_is_one_line_and_an_ab_arm_sets_it():
    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, lane_handoff="courier"))
    assert "lane_handoff" in str(err.value) and "executor, lock" in str(err.value) and "\n" not in str(err.value)
    arm = parse_ab("lane_handoff=lock", SessionConfig(turns=2, tokens=2, lanes=2, overlap=True), "warm", "host")
    assert arm.config.lane_handoff == "lock" and " handoff=lock " in session_label("m.gguf", arm.config)


@pytest.mark.parametrize("kw, said", [
    (dict(schedule="eager", placement="pool", lane_handoff="lock", switch_interval_us=300),
     "lanes 3 overlap (schedule eager, handoff lock, switch interval 300 µs); "),
    ({}, "lanes 3 overlap; "),
])
def test_the_sessions_text_says_how_its_lanes_ran(models, kw, said):
    from workbench.measure.session.record import summary_line

    slices = [n for b in models["odd"].blobs for _, n in b.slices]
    cfg = SessionConfig(turns=2, tokens=2, experts_per_token=2, lanes=3, overlap=True,
                        cache_mib=max(sum(slices) / 3, 30 * -(-max(slices) // 4096) * 4096) / 2**20, **kw)
    with ExpertSession(models["odd"], HostDevice(), cfg) as s:
        list(s.turns())
        report = s.report()
    assert said in summary_line(report)
