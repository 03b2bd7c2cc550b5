"""``release_advice="recycle"`` (issue 34 §5): the pages an admission evicts are moved, still resident,
into the evicting miss's slot (mremap with MREMAP_DONTUNMAP) instead of going back to the kernel, so the
miss's read writes pages it does not have to fault in and zero; what the miss does not take goes back
with MADV_DONTNEED. The bytes landed, the cache's bookkeeping and what mincore finds resident must be
exactly those of ``dontneed``; a platform that cannot move pages is one ParamError line."""
from __future__ import annotations

import json
import mmap
import random
import resource

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import write_raw_model
from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert import memory
from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.memory import Reservation
from workbench.expert.recycle import move
from workbench.expert.session_config import SessionConfig, check_config
from workbench.formats.index import ExpertBlob
from workbench.measure.session.ab import parse_ab

PAGE = mmap.PAGESIZE
needs_recycle = pytest.mark.skipif(bool(memory.recycle_refusal()), reason=memory.recycle_refusal() or "")


def _fill_pages(r: Reservation, first: int, n: int, base: int) -> None:
    arr = np.frombuffer(r.view, dtype=np.uint8)
    for p in range(first, first + n):
        arr[p * PAGE:(p + 1) * PAGE] = (base + p) % 251
    del arr


@needs_recycle
def test_moved_pages_keep_their_bytes_leave_the_source_empty_and_take_no_fault_to_rewrite():
    src, dst = Reservation(64 * PAGE, "recycle"), Reservation(64 * PAGE, "recycle")
    try:
        _fill_pages(src, 0, 64, 3)
        assert dst.move_in(src, 8, 20, 32)
        d, s = np.frombuffer(dst.view, dtype=np.uint8), np.frombuffer(src.view, dtype=np.uint8)
        assert all(d[(20 + i) * PAGE] == (3 + 8 + i) % 251 for i in range(32))
        resident = src.resident_map()
        assert not resident[8:40].any() and resident[:8].all() and resident[40:].all()
        assert dst.resident_map()[20:52].all() and not dst.resident_map()[:20].any()
        assert not s[8 * PAGE:40 * PAGE].any()  # left mapped and empty (reads zero)
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        d[20 * PAGE:52 * PAGE] = 9
        assert resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0 < 4  # resident: written in place
        del d, s
        with pytest.raises(ValueError, match="outside the reservations"):
            dst.move_in(src, 60, 0, 8)
    finally:
        src.close()
        dst.close()


@needs_recycle
def test_a_run_the_kernel_refuses_whole_is_moved_by_halves_and_a_page_it_refuses_stays_behind():
    """Kernels before 6.17 refuse a move whose source spans two mappings: the cache halves such a run
    until every part moves, and hands back (via admit) a page that will not move at all."""
    src, dst = Reservation(16 * PAGE, "recycle"), Reservation(16 * PAGE, "recycle")
    calls = []

    class Refusing:  # as such a kernel: a mapping boundary between source pages 4|5 and 5|6; page 9 never moves
        def __init__(self, r):
            self.r = r

        def move_in(self, source, first, to, n):
            calls.append((first, n))
            if (first < 5 < first + n) or (first < 6 < first + n) or first <= 9 < first + n:
                return False
            return self.r.move_in(source.r, first, to, n)

    try:
        _fill_pages(src, 0, 16, 0)
        assert move([Refusing(src), Refusing(dst)], 0, 2, 1, 0, 8) == [(9, 1)]
        assert calls[0] == (2, 8) and all(n >= 1 for _, n in calls)
        d = np.frombuffer(dst.view, dtype=np.uint8)
        assert [int(d[i * PAGE]) for i in range(7)] == [2, 3, 4, 5, 6, 7, 8]
        assert not d[7 * PAGE:8 * PAGE].any()  # page 9 stayed behind: nothing landed in its place
        assert src.resident_map()[9] and not src.resident_map()[2:9].any()
        del d
    finally:
        src.close()
        dst.close()


@needs_recycle
def test_a_refusal_other_than_spanning_mappings_leaves_the_run_behind_without_halving(tmp_path, monkeypatch):
    """Out of mappings (ENOMEM): one failing call a run, not 2n - 1; the pages go back and the reads fault
    them in, the bytes still the file's."""
    import errno

    calls = []

    def refuse(src, dst, nbytes):
        calls.append(nbytes)
        return errno.ENOMEM

    monkeypatch.setattr(memory, "move_pages", refuse)
    path, blobs = _blobs(tmp_path, 8 * PAGE, 8)
    data = open(path, "rb").read()
    with ExpertCache(path, blobs, budget_bytes=2 * 8 * PAGE, placement="aligned", release_advice="recycle",
                     reader="pread") as cache:
        for e in range(8):
            cache.stage(SliceKey(0, e))
        assert len(calls) == 6 and cache.counters().recycled_pages == 0  # one call per miss that evicted
        for key in cache.live_keys():
            offset, nbytes = blobs[0].slices[key.expert]
            view = cache.view(key)
            assert view == data[offset:offset + nbytes]
            view.release()
        mem = cache.memory()
        assert mem.resident_pages == mem.committed_pages == 16


def _blobs(tmp_path, stride: int, n: int):
    index = write_raw_model(tmp_path / f"raw-{stride}.bin", [stride] * n, first=1152, tail=PAGE + 123)
    return index.path, (ExpertBlob(0, "up", n, stride, True, tuple((t.offset, t.nbytes) for t in index.tensors),
                                   tuple(t.name for t in index.tensors)),)


@needs_recycle
@pytest.mark.parametrize("stride,n,held", [(3 * PAGE + 100, 16, 4), (777, 40, 7), (200 * PAGE + 13, 10, 3)])
@pytest.mark.parametrize("placement", ["inplace", "bounce", "aligned"])
@pytest.mark.parametrize("release", ["on", "off"])
def test_recycle_lands_the_files_bytes_with_the_bookkeeping_and_residency_of_dontneed(tmp_path, stride, n, held,
                                                                                       placement, release):
    path, blobs = _blobs(tmp_path, stride, n)
    data = open(path, "rb").read()
    seen = {}
    for advice in ("dontneed", "recycle"):
        with ExpertCache(path, blobs, budget_bytes=held * stride, placement=placement, boundary_release=release,
                         release_advice=advice, reader="pread") as cache:
            rnd = random.Random(7)
            for step in range(240):
                cache.stage(SliceKey(0, rnd.randrange(n)))
                if step % 40 == 39:
                    for key in cache.live_keys():  # every byte, the moved pages' included
                        offset, nbytes = blobs[0].slices[key.expert]
                        view = cache.view(key)
                        assert view == data[offset:offset + nbytes], (advice, step, key)
                        view.release()
                    mem = cache.memory()  # nothing outlives the accounting: resident is committed
                    assert mem.resident_pages == mem.committed_pages and mem.lazyfree_pages == 0
            mem, c = cache.memory(), cache.counters()
            seen[advice] = (mem.accounted_pages, mem.committed_pages, mem.unreleased_pages, mem.resident_pages,
                            mem.live_bytes, c.released_pages, c.evictions, c.misses)
            recycled = c.recycled_pages
    assert seen["dontneed"] == seen["recycle"]
    if stride > PAGE:  # slices of several pages: evictions free whole pages for the next miss to take
        assert recycled > seen["recycle"][5] // 2


@needs_recycle
def test_a_full_caches_misses_fault_far_fewer_pages_in(tmp_path):
    path, blobs = _blobs(tmp_path, 40 * PAGE + 5, 24)
    faults = {}
    for advice in ("dontneed", "recycle"):
        with ExpertCache(path, blobs, budget_bytes=6 * (40 * PAGE + 5), release_advice=advice,
                         reader="pread") as cache:
            for e in range(6):
                cache.stage(SliceKey(0, e))  # full
            f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            for e in range(6, 24):
                assert not cache.stage(SliceKey(0, e))  # each a miss that evicts one
            faults[advice] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0
    assert faults["dontneed"] >= 18 * 40  # every page of every miss faulted in afresh
    assert faults["recycle"] < 18 * 4  # the evicted pages, moved in: written in place


@needs_recycle
def test_the_moves_are_done_when_admit_returns_before_any_lane_reads(tmp_path):
    """The miss's pages are moved in by its admission (the decode thread), so a lane reading it or a
    neighbour sharing a page with it never meets a page being moved: resident is committed already."""
    stride = 3 * PAGE
    path, blobs = _blobs(tmp_path, stride, 8)
    data = open(path, "rb").read()
    with ExpertCache(path, blobs, budget_bytes=2 * stride, placement="aligned", release_advice="recycle",
                     reader="pread") as cache:
        k = [SliceKey(0, e) for e in range(8)]
        cache.stage(k[0])
        cache.stage(k[1])
        slot = [cache.layouts[0].slots[e] // PAGE for e in range(8)]
        kind2 = cache.admit(k[2])  # evicts k0: its three pages are k2's now, before any read
        resident = cache.reservations[0].resident_map()
        assert resident[slot[2]:slot[2] + 3].all() and not resident[slot[0]:slot[0] + 3].any()
        mem = cache.memory()
        assert cache.counters().recycled_pages == 3 and mem.resident_pages == mem.committed_pages == 6
        kind0 = cache.admit(k[0])  # evicts k1 into k0's slot
        for key, kd in ((k[0], kind0), (k[2], kind2)):  # read in the other order
            cache.complete(key, cache.fill(key, cache.reader(kd, cache.file_of(key))), kd)
            cache.unpin(key)
        for key in (k[0], k[2]):
            offset, nbytes = blobs[0].slices[key.expert]
            view = cache.view(key)
            assert view == data[offset:offset + nbytes]
            view.release()
        mem = cache.memory()
        assert cache.counters().recycled_pages == 6 and mem.resident_pages == mem.committed_pages == 6


def test_a_platform_that_cannot_move_pages_is_one_param_error(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "_recycle_refusal", "mremap cannot move pages here (Invalid argument; "
                        "MREMAP_DONTUNMAP needs Linux >= 5.7)")
    with pytest.raises(ParamError, match="release_advice.*recycle: mremap cannot move pages") as err:
        check_config(SessionConfig(turns=1, tokens=1, release_advice="recycle"))
    assert "\n" not in str(err.value)
    with pytest.raises(ParamError, match="recycle"):
        Reservation(PAGE, "recycle")
    Reservation(PAGE, "dontneed").close()
    with pytest.raises(ParamError, match="'keep' is not one of dontneed, free, recycle"):
        Reservation(PAGE, "keep")


def test_an_ab_arm_sets_recycle():
    base = SessionConfig(turns=2, tokens=2)
    arm = parse_ab("release_advice=recycle", base, "warm", "host")
    assert arm.config.release_advice == "recycle" and arm.changed == ("release_advice",)


@needs_recycle
@pytest.mark.parametrize("batch", [False, True])
def test_a_session_recycles_verifies_and_says_so_in_json_notes_and_ledger(synth_model, tmp_path, monkeypatch, batch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    ledger = tmp_path / "l.sqlite"
    out = CliRunner().invoke(main, ["session", index.path, "--turns", "3", "--tokens", "4", "--cache-mib", "0.5",
                                    "--experts-per-token", "2", "--reader", "pread", "--release-advice", "recycle",
                                    "--lanes", "2", "--overlap", "--verify",
                                    *(["--batch-misses"] if batch else []),
                                    "--ledger", str(ledger), "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["summary"]["facts"]["release_advice"] == "recycle"
    assert sum(t["recycled_pages"] for t in doc["turns"][1:]) > 0
    assert doc["summary"]["recycled_pages"] == sum(t["recycled_pages"] for t in doc["turns"])
    from workbench.ledger import Ledger
    from workbench.ledger.sessions import session_facts

    with Ledger(ledger) as store:
        a = store.attempts().iloc[-1]
    assert a["params"]["release_advice"] == "recycle" and "advice=recycle" in a["label"]
    assert "release advice recycle:" in a["notes"] and "taken over by the misses" in a["notes"]
    assert "evicted pages taken over by misses" in session_facts(a)


def _gguf_py_moe(path):
    """A MoE GGUF written by gguf-py (not our writer): 2 blocks × gate/up/down × 16 experts in F16, Q4_0,
    F32, BF16 and Q8_0 — slices of 6,660–17,760 B, none a page multiple, so slots share boundary pages."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    from foreign_writers import write_gguf_moe

    kinds = {(0, "gate"): "F16", (0, "up"): "Q4_0", (0, "down"): "F32", (1, "gate"): "BF16", (1, "up"): "Q8_0",
             (1, "down"): "Q4_0"}
    rng = np.random.default_rng(11)

    def add(writer):
        for (layer, part), kind in kinds.items():
            w = rng.standard_normal((16, 37, 320)).astype(np.float32)
            name = f"blk.{layer}.ffn_{part}_exps.weight"
            if kind == "F16":
                writer.add_tensor(name, w.astype(np.float16))
            elif kind == "F32":
                writer.add_tensor(name, w[:, :, :120].copy())
            elif kind == "BF16":
                writer.add_tensor(name, (w.view(np.uint32) >> 16).astype(np.uint16), raw_dtype=Q.BF16)
            else:
                writer.add_tensor(name, quantize(w, Q[kind]), raw_dtype=Q[kind])

    return write_gguf_moe(path, add, blocks=2, experts=16, used=4)


@needs_recycle
@pytest.mark.parametrize("batch", [False, True])
def test_recycle_lands_the_bytes_of_a_file_gguf_py_wrote(tmp_path, monkeypatch, batch):
    """Exact bytes on a file nobody here wrote: every landed slice checked against the file (--verify), with
    evicted pages really taken over (recycled_pages > 0: the fast path engaged, not a silent fallback)."""
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    model = _gguf_py_moe(tmp_path / "gguf-py-moe.gguf")
    out = CliRunner().invoke(main, ["session", str(model), "--turns", "4", "--tokens", "4", "--cache-mib", "0.25",
                                    "--experts-per-token", "4", "--reader", "pread", "--release-advice", "recycle",
                                    "--lanes", "2", "--overlap", "--verify", *(["--batch-misses"] if batch else []),
                                    "--ledger", str(tmp_path / "l.sqlite"), "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)["summary"]
    assert summary["verified_slices"] > 0 and summary["recycled_pages"] > 0, summary
