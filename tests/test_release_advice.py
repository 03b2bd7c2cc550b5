"""``release_advice``: how the expert cache hands evicted pages back — ``dontneed`` (MADV_DONTNEED: a
later write faults fresh zeroed pages in) or ``free`` (MADV_FREE: the kernel keeps them until pressure,
a later write reuses them without a fault). The cache's bookkeeping means the same under both; what
mincore and RSS still count as resident is reported separately (smaps ``LazyFree``) and taken out of
the comparisons; asking for MADV_FREE where the platform has none is one ParamError line."""
from __future__ import annotations

import dataclasses
import json
import mmap
import resource

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import write_raw_model
from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.memory import Reservation, lazyfree_bytes, resident_and_lazyfree
from workbench.expert.procstat import CgroupProbe
from workbench.expert.session_config import SessionConfig, check_config
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import summarize
from workbench.formats.index import ExpertBlob
from workbench.measure.session.ab import parse_ab
from workbench.measure.session.pressure import MemoryLimit, MemoryPressure

PAGE = mmap.PAGESIZE
PAGES = 256  # 1 MiB: far more than the kernel's per-CPU batch of pages not yet marked lazily free
needs_free = pytest.mark.skipif(not hasattr(mmap, "MADV_FREE"), reason="this platform's mmap has no MADV_FREE")


def _faults_writing(r: Reservation, value: int) -> tuple[int, int]:
    """(minor faults this thread took filling ``r`` with ``value``, the first byte before the write)."""
    arr = np.frombuffer(r.view, dtype=np.uint8)
    before = int(arr[0])  # read first: under DONTNEED this maps the zero page, the write then faults again
    f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    arr.fill(value)
    f1 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    del arr
    return f1 - f0, before


@needs_free
def test_free_rewrites_the_same_pages_without_faults_dontneed_faults_zeroed_ones():
    faults, first = {}, {}
    for advice in ("dontneed", "free"):
        r = Reservation(PAGES * PAGE, advice)
        try:
            _faults_writing(r, 7)
            r.release(0, r.pages)
            faults[advice], first[advice] = _faults_writing(r, 9)
        finally:
            r.close()
    assert first["dontneed"] == 0 and faults["dontneed"] >= PAGES  # every page faulted in afresh, zeroed
    assert faults["free"] < PAGES // 8  # the pages were still there: written in place


@needs_free
def test_lazyfree_is_read_back_for_the_reservation_and_gone_once_rewritten():
    r, other = Reservation(PAGES * PAGE, "free"), Reservation(PAGES * PAGE, "free")
    try:
        np.frombuffer(r.view, dtype=np.uint8).fill(1)
        np.frombuffer(other.view, dtype=np.uint8).fill(1)
        other.release(0, other.pages)
        if lazyfree_bytes([r.span]) < 0:
            pytest.skip("this kernel reports no LazyFree in /proc/self/smaps (< 4.12)")
        assert lazyfree_bytes([r.span]) == 0  # the neighbour's lazily-freed pages are not counted as r's
        assert lazyfree_bytes([other.span]) > 0
        r.release(0, r.pages)
        lazy = lazyfree_bytes([r.span])
        assert PAGES * PAGE // 2 <= lazy <= PAGES * PAGE  # (a per-CPU batch may lag being marked)
        resident, lazy_pages = resident_and_lazyfree([r])
        assert resident == PAGES and lazy_pages == lazy // PAGE  # mincore still counts every one of them
        np.frombuffer(r.view, dtype=np.uint8).fill(2)
        assert lazyfree_bytes([r.span]) == 0  # written again: the process's own pages once more
    finally:
        r.close()
        other.close()


def test_lazyfree_sums_the_mappings_that_overlap_and_says_when_the_kernel_has_none(tmp_path):
    smaps = tmp_path / "smaps"
    smaps.write_text("1000-3000 rw-p 00000000 00:00 0 \nRss:  8 kB\nLazyFree:  4 kB\n"
                     "3000-5000 rw-p 00000000 00:00 0 \nLazyFree:  8 kB\n"
                     "7f00-8000 r-xp 00000000 08:01 12 /usr/lib/libc.so\nLazyFree:  16 kB\n")
    assert lazyfree_bytes([(0x1000, 0x2000)], str(smaps)) == 4096
    assert lazyfree_bytes([(0x2000, 0x4000), (0x1000, 0x1800)], str(smaps)) == 12 * 1024  # each mapping once
    assert lazyfree_bytes([(0x9000, 0xA000)], str(smaps)) == 0
    (tmp_path / "old").write_text("1000-3000 rw-p 00000000 00:00 0 \nRss:  8 kB\n")
    assert lazyfree_bytes([(0x1000, 0x2000)], str(tmp_path / "old")) == -1
    assert lazyfree_bytes([(0x1000, 0x2000)], str(tmp_path / "missing")) == -1


def _blobs(tmp_path, n: int = 16, stride: int = 3 * PAGE, first: int = 1152):
    index = write_raw_model(tmp_path / "raw.bin", [stride] * n, first=first, tail=PAGE + 123)
    return index.path, (ExpertBlob(0, "up", n, stride, True, tuple((t.offset, t.nbytes) for t in index.tensors),
                                   tuple(t.name for t in index.tensors)),)


@needs_free
@pytest.mark.parametrize("release", ["on", "off"])
def test_the_cache_bookkeeping_is_the_same_under_both_advices(tmp_path, release):
    path, blobs = _blobs(tmp_path)
    data = open(path, "rb").read()
    seen = {}
    for advice in ("dontneed", "free"):
        with ExpertCache(path, blobs, budget_bytes=4 * 3 * PAGE, boundary_release=release,
                         release_advice=advice) as cache:
            assert cache.facts.release_advice == advice
            for step in range(120):
                cache.stage(SliceKey(0, (step * 7) % 16))
            for key in cache.live_keys():  # every live entry's bytes are the file's (reused pages included)
                offset, nbytes = blobs[0].slices[key.expert]
                view = cache.view(key)
                assert view == data[offset:offset + nbytes]
                view.release()
            mem, c = cache.memory(), cache.counters()
            seen[advice] = (mem.accounted_pages, mem.committed_pages, mem.unreleased_pages, mem.live_bytes,
                            c.released_pages, c.evictions, c.misses)
            if advice == "dontneed":
                assert mem.lazyfree_pages == 0 and mem.resident_pages == mem.committed_pages == mem.held_pages
            elif mem.lazyfree_pages >= 0:  # mincore sees the released pages; LazyFree says which they are
                assert mem.resident_pages > mem.committed_pages
                assert 0 < mem.lazyfree_pages <= mem.resident_pages - mem.committed_pages
    assert seen["dontneed"] == seen["free"]


def test_an_unknown_advice_or_a_platform_without_madv_free_is_one_param_error(tmp_path, monkeypatch):
    path, blobs = _blobs(tmp_path, n=4)
    with pytest.raises(ParamError, match="release_advice.*'lazy' is not one of dontneed, free"):
        ExpertCache(path, blobs, budget_bytes=4 * 3 * PAGE, release_advice="lazy")
    monkeypatch.delattr(mmap, "MADV_FREE", raising=False)
    with pytest.raises(ParamError, match="no MADV_FREE") as err:
        check_config(SessionConfig(turns=1, tokens=1, release_advice="free"))
    assert "\n" not in str(err.value)
    with pytest.raises(ParamError, match="no MADV_FREE"):
        Reservation(PAGE, "free")
    Reservation(PAGE, "dontneed").close()  # the default never needs it


def _turn(i: int, anon: int, resident: int, lazy: int) -> TurnRecord:
    return TurnRecord(turn=i, tokens=4, bytes_read=1, hits=1, misses=1, evictions=1, minflt=0, majflt=0,
                      accounted_bytes=100 * PAGE, actual_anon_bytes=anon, unreleased_pages=0, seconds=1.0,
                      tokens_per_s=4.0, resident_bytes=resident, lazyfree_bytes=lazy)


def test_the_summary_holds_resident_and_anonymous_memory_less_lazyfree_against_the_accounting():
    facts = SessionFacts("inplace", "", "ON", "pread", "", "on", "lru", 1, 1, 1, "synthetic", "", "host", False,
                         release_advice="free")
    turns = [_turn(0, 300 * PAGE, 100 * PAGE, 0), _turn(1, 500 * PAGE, 300 * PAGE, 200 * PAGE)]
    s = summarize(turns, facts)
    assert s.resident_minus_accounted_bytes == 0  # the 200 pages mincore sees are the kernel's to take
    assert s.anon_minus_accounted_growth_bytes == 0
    assert s.lazyfree_bytes_last == s.lazyfree_bytes_max == 200 * PAGE
    assert SessionFacts.from_json(json.loads(json.dumps(facts.to_json()))).release_advice == "free"
    assert TurnRecord.from_json({**turns[1].to_json()}).held_anon_bytes == 300 * PAGE


def test_an_ab_arm_sets_the_advice():
    base = SessionConfig(turns=2, tokens=2)
    arm = parse_ab("release_advice=free", base, "warm", "host")
    assert arm.config.release_advice == "free" and arm.changed == ("release_advice",)
    assert parse_ab("release-advice=dontneed", base, "warm", "host").config == base


def test_a_limit_hit_that_only_reclaimed_lazily_freed_pages_is_no_pressure(tmp_path):
    p = MemoryPressure(64, "cgroup")
    p.limit = MemoryLimit("cgroup-v2", 64 << 20, str(tmp_path / "gone"), 2)
    assert p.outcome(0, 0, 0, 40).startswith("reclaim and re-reads")  # without lazily-freed pages: as before
    said = p.outcome(0, 0, 0, 40, lazyfreed=256)
    assert said.startswith("no pressure seen beyond released pages") and "1.0 MiB" in said
    assert p.outcome(0, 12, 0, 40, lazyfreed=256).startswith("reclaim and re-reads")  # refaults still count
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "memory.stat").write_text("pgsteal 10\npglazyfree 300\npglazyfreed 256\n")
    assert CgroupProbe(str(tmp_path / "cg"), 2).read().lazyfreed == 256


@needs_free
def test_a_session_says_its_advice_in_facts_params_label_and_notes(synth_model, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    ledger = tmp_path / "l.sqlite"
    out = CliRunner().invoke(main, ["session", index.path, "--turns", "3", "--tokens", "4", "--cache-mib", "0.5",
                                    "--experts-per-token", "2", "--reader", "pread", "--release-advice", "free",
                                    "--ledger", str(ledger), "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["summary"]["facts"]["release_advice"] == "free"
    assert all(t["lazyfree_bytes"] >= 0 for t in doc["turns"]) and doc["turns"][-1]["lazyfree_bytes"] > 0
    from workbench.ledger import Ledger

    with Ledger(ledger) as store:
        a = store.attempts().iloc[-1]
    assert a["params"]["release_advice"] == "free" and "advice=free" in a["label"]
    assert "release advice free (MADV_FREE)" in a["notes"]
    assert dataclasses.asdict(SessionConfig(1, 1))["release_advice"] == "dontneed"
