"""benchmarks/probe/probe_threads.py: every case starts all N threads, counts each birth once, and leaves no
thread behind, and the interpreter's switch interval is put back however a case ends (the H200 call runs
it once, with no room for a retry)."""
from __future__ import annotations

import json
import os
import sys
import threading

import pytest

@pytest.fixture()
def probe(bench_module):
    return bench_module("probe_threads")

@pytest.fixture()
def warm(warm_file):
    return warm_file(16 * 1024 * 1024)  # two 8 MiB pieces

@pytest.mark.parametrize("n", [1, 2, 5, 8])
@pytest.mark.parametrize("tree", [False, True])
def test_a_set_starts_every_thread_once_and_joins_them(probe, n, tree):
    before = threading.active_count()
    ms = probe.one_set(n, probe.idle, tree=tree)
    assert ms > 0 and threading.active_count() == before
    s = probe.Starts(n, probe.idle)
    s.launch(tree)
    assert s.all_born.wait(10)
    s.close()
    assert len(s.births) == n and len(s.threads) == n  # a tree starts each index once
    assert threading.active_count() == before

def test_busy_readers_read_the_file_until_stopped(probe, warm, monkeypatch):
    offsets = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, off: offsets.append(off) or real(fd, bufs, off))
    before = threading.active_count()
    assert probe.one_set(3, probe.reader(warm)) > 0
    assert threading.active_count() == before
    assert offsets and all(off % probe.PIECE == 0 and off < os.path.getsize(warm) for off in offsets)

def test_switch_interval_is_put_back_when_a_case_fails(probe, monkeypatch):
    old = sys.getswitchinterval()
    probe.one_set(2, probe.idle, switch=1e-4)
    assert sys.getswitchinterval() == old
    monkeypatch.setattr(probe.Starts, "born", lambda self: None)
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="only 0 of 2 threads started in 0.2 s"):
        probe.one_set(2, probe.idle, switch=1e-4, limit_s=0.2)
    assert sys.getswitchinterval() == old and threading.active_count() == before

def test_main_writes_every_case(probe, warm, tmp_path):
    out = tmp_path / "p.json"
    assert probe.main(["--file", warm, "--threads", "2", "--repeat", "2", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for case in ("serial_idle", "serial_busy", "serial_busy_switch", "tree_idle"):
        r = d[f"{case}_2t_ms"]
        assert r["n"] == 2 and 0 < r["min"] <= r["median"] <= r["max"]
