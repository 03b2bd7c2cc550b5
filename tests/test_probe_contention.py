"""benchmarks/probe/probe_contention.py runs on the host backend, counts the readers' bytes, and gives back
what it takes (the H200 call runs it once, with no room for a retry)."""
from __future__ import annotations

import json
import time

import pytest

from workbench.upload.host import HostDevice

MiB = 1 << 20


@pytest.fixture()
def probe(bench_module):
    return bench_module("probe_contention")


@pytest.fixture()
def warm(warm_file):
    return warm_file(8 * MiB)


def test_engine_alone_has_no_reads_and_releases_everything(probe, warm):
    with HostDevice() as dev:
        before = dev.usage()
        out = probe.engine_under_readers(dev, warm, 0, 8 * MiB, MiB, 3, 1)
        assert out["engine_gbps"] > 0 and out["reads_gbps"] == 0 and out["reads_alone_gbps"] == 0
        assert dev.usage() == before


class SlowCopies(HostDevice):
    """Each copy takes 50 ms: the engine's window (8 copies, 0.4 s) is long enough for any reader to
    finish a 1 MiB pread in it, however loaded the machine (a 16 MiB host copy takes ~1 ms, and on
    CI's busy 2 cores two readers once finished none in it)."""

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        time.sleep(0.05)
        super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)


def test_readers_read_during_the_copies_and_alone(probe, warm):
    with SlowCopies() as dev:
        before = dev.usage()
        out = probe.engine_under_readers(dev, warm, 2, 8 * MiB, MiB, 2, 1)
        assert 0 < out["engine_gbps"] < 1  # 8 MiB in >= 0.4 s: the slow copies were timed
        assert out["reads_gbps"] > 0 and out["reads_alone_gbps"] > 0
        assert dev.usage() == before


def test_readers_count_every_byte_they_read(probe, warm):
    # until each reader has counted a read (a loaded box may start the second only after the first read
    # 4 MiB: stopping then would leave it at 0), with a generous bound: a reader counting into another's
    # counter still fails
    deadline = time.monotonic() + 60
    with probe.Readers(warm, 2, MiB) as r:
        while (r.bytes() < 4 * MiB or not all(r.counts)) and time.monotonic() < deadline:
            time.sleep(0.001)
    assert r.bytes() % MiB == 0 and all(c > 0 for c in r.counts), r.counts


def test_main_writes_the_ratio_to_the_engine_alone(probe, warm, tmp_path):
    out = tmp_path / "c.json"
    assert probe.main(["--device", "host", "--file", warm, "--readers", "0,1", "--total", "8", "--piece", "1",
                       "--slots", "2", "--repeat", "1", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["engine_under_readers_over_alone"]["readers_0"] == 1.0
    assert set(got["readers_1"]) == {"engine_gbps", "reads_gbps", "reads_alone_gbps"}


def test_readers_into_the_engines_slots_leave_them_to_the_engine(probe, warm):
    with SlowCopies() as dev:
        before = dev.usage()
        out = probe.engine_under_readers(dev, warm, 3, 8 * MiB, MiB, 2, 1, into_slots=True)
        assert 0 < out["engine_gbps"] < 1 and out["reads_gbps"] > 0
        assert dev.usage() == before


def test_readers_into_given_buffers_write_them_and_do_not_free_them(probe, warm):
    bufs = [probe.fresh(MiB) for _ in range(2)]
    with probe.Readers(warm, 3, MiB, bufs) as r:
        while min(r.counts) == 0:
            pass
    assert bytes(bufs[0][1][:256]) != bytes(256) and bytes(bufs[1][1][:256]) != bytes(256)
    for m, v in bufs:  # still ours: open until released here
        v.release()
        m.close()


def test_main_into_slots_runs_each_reader_count_twice(probe, warm, tmp_path):
    out = tmp_path / "c.json"
    assert probe.main(["--device", "host", "--file", warm, "--readers", "0,2", "--total", "8", "--piece", "1",
                       "--slots", "2", "--repeat", "1", "--into-slots", "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert {"readers_0", "readers_2", "readers_2_into_slots"} <= set(got) and "readers_0_into_slots" not in got
    assert set(got["engine_under_readers_over_alone"]) == {"readers_0", "readers_2", "readers_2_into_slots"}
