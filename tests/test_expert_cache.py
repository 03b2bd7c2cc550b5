"""The expert cache: bytes equal the file's for every placement and reader, the budget holds, the
boundary rule decides what the kernel gets back (measured by mincore), and in-place reads copy nothing."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from conftest import write_raw_model
from workbench.errors import ParamError
from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.layout import layout_blob
from workbench.expert.policy import FifoPolicy
from workbench.expert.readers import DirectInplaceReader, open_reader
from workbench.formats.index import ExpertBlob
from workbench.io.direct import AlignedBuffer, direct_io_support

PAGE = 4096
PLACEMENTS = ["inplace", "bounce", "aligned"]
READERS = ["pread", "direct-bounce", "direct-inplace", "pread-random"]


@pytest.fixture(scope="module")
def odirect(tmp_path_factory) -> bool:
    return bool(direct_io_support(tmp_path_factory.mktemp("odirect")))


def raw_blobs(tmp_path, stride: int, n: int, first: int, layers: int = 2):
    """A random file holding ``layers`` contiguous blobs of ``n`` experts, ``stride`` bytes each."""
    sizes = [stride] * (n * layers)
    index = write_raw_model(tmp_path / f"raw-{stride}-{first}.bin", sizes, first=first, tail=PAGE + 123)
    blobs = []
    for layer in range(layers):
        ts = index.tensors[layer * n:(layer + 1) * n]
        blobs.append(ExpertBlob(layer, "up", n, stride, True, tuple((t.offset, t.nbytes) for t in ts),
                                tuple(t.name for t in ts)))
    return index.path, tuple(blobs)


def check_live_bytes(cache: ExpertCache, path: str) -> int:
    data = open(path, "rb").read()
    for key in list(cache._live):
        offset, nbytes = cache.blobs[key.blob].slices[key.expert]
        view = cache.view(key)
        try:
            assert view == data[offset:offset + nbytes], f"{key} differs from the file"
        finally:
            view.release()
    return len(cache)


def churn(cache: ExpertCache, steps: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    for _ in range(steps):
        b = rnd.randrange(len(cache.blobs))
        cache.stage(SliceKey(b, rnd.randrange(cache.blobs[b].n_experts)))


# (stride, first): page multiples off the page (the write-up's 1152), odd remainders, tiny and large
LAYOUTS = [(2 * PAGE, 1152), (PAGE, 64), (1000, 37), (100, 4095), (3 * PAGE + 100, 777), (9 * PAGE, 0)]


@pytest.mark.parametrize("stride,first", LAYOUTS)
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("release", ["on", "off"])
def test_bytes_in_the_cache_are_the_files(tmp_path, stride, first, placement, reader, release):
    path, blobs = raw_blobs(tmp_path, stride, 8, first)
    with ExpertCache(path, blobs, budget_bytes=5 * stride, placement=placement, boundary_release=release,
                     reader=reader) as cache:
        for step in range(4):
            churn(cache, 40, seed=step)
            assert check_live_bytes(cache, path) >= 1
            assert cache.memory(measure=False).live_bytes <= 5 * stride
        c = cache.counters()
        assert c.evictions > 0 and c.misses + c.hits == 160


def test_the_random_reader_turns_readahead_off_on_its_own_descriptor(tmp_path, monkeypatch):
    from workbench.expert import readers

    path, blobs = raw_blobs(tmp_path, 3 * PAGE + 100, 4, 777)
    advised = []
    real = readers.os.posix_fadvise
    monkeypatch.setattr(readers.os, "posix_fadvise", lambda fd, o, n, a: (advised.append((fd, o, n, a)), real(fd, o, n, a)))
    reader = readers.make_reader("pread-random", path)
    try:
        assert advised == [(reader._fd, 0, 0, readers.os.POSIX_FADV_RANDOM)]  # the whole file, this descriptor
        region = memoryview(bytearray(blobs[0].stride + 10))
        offset, nbytes = blobs[0].slices[1]
        assert reader.read_into(region, 5, offset, nbytes).io_bytes == nbytes
        assert region[5:5 + nbytes] == open(path, "rb").read()[offset:offset + nbytes]
        assert bytes(region[:5]) == bytes(5) and bytes(region[5 + nbytes:]) == bytes(10 - 5 + blobs[0].stride - nbytes)
    finally:
        reader.close()
    assert readers.resolve_reader("pread-random", path) == ("pread-random", "")  # no O_DIRECT needed


def test_synthetic_alignment_64_model_every_placement(synth_model, odirect):
    index = synth_model("gguf", "moe", alignment=64, size=3 << 20, experts=8)
    for placement in PLACEMENTS:
        with ExpertCache(index.path, index.blobs, budget_bytes=6 * index.blobs[0].stride,
                         placement=placement) as cache:
            churn(cache, 120)
            assert check_live_bytes(cache, index.path) == 6
            c = cache.counters()
            if placement == "inplace":
                assert cache.facts.placement_report.state == "ON"
                if odirect:  # every read went straight into its slot: no shift copy at all
                    assert cache.facts.reader == "direct-inplace"
                    assert c.shift_copy_bytes == 0 and c.inplace_reads == c.misses > 0
            elif placement == "bounce" and odirect:
                assert c.shift_copy_bytes == c.bytes_read > 0 and c.inplace_reads == 0


def test_alignment_32_model_declines_placement_and_still_reads_right(synth_model, odirect):
    index = synth_model("gguf", "moe", alignment=32, size=3 << 20, experts=8)
    with ExpertCache(index.path, index.blobs, budget_bytes=6 * index.blobs[0].stride, placement="inplace") as cache:
        report = cache.facts.placement_report
        assert report.state == "INERT" and "under-align" in str(report)
        assert {lay.placement for lay in cache.layouts} == {"bounce"}
        churn(cache, 80)
        check_live_bytes(cache, index.path)
        if odirect:  # remainder mismatch: the in-place reader bounces every read and says so by its counts
            assert cache.counters().inplace_reads == 0 and cache.counters().shift_copy_bytes > 0


def three_neighbours(tmp_path, release: str):
    path, blobs = raw_blobs(tmp_path, 2 * PAGE, 4, 1152, layers=1)
    cache = ExpertCache(path, blobs, budget_bytes=10 * PAGE, placement="inplace", boundary_release=release)
    for e in range(3):
        cache.stage(SliceKey(0, e))
    return path, cache


def test_off_leaks_the_boundary_pages_for_good(tmp_path):
    path, cache = three_neighbours(tmp_path, "off")
    with cache:
        held = cache.memory()
        assert held.accounted_pages == held.committed_pages == held.resident_pages == 7  # 3 x 2 pages + 1 shared
        for e in range(3):
            cache.evict(SliceKey(0, e))
        gone = cache.memory()
        # the 4 boundary pages (two shared between neighbours, two with the padding) stay committed
        assert gone.accounted_pages == 0 and gone.unreleased_pages == 4
        assert gone.resident_pages == 4  # the kernel still holds them: mincore agrees with the count


def test_on_releases_a_boundary_page_once_no_live_entry_touches_it(tmp_path):
    path, cache = three_neighbours(tmp_path, "on")
    with cache:
        cache.evict(SliceKey(0, 1))  # both neighbours live: its two shared pages must stay
        assert check_live_bytes(cache, path) == 2  # neighbours intact (releasing a shared page zeroes them)
        mem = cache.memory()
        assert mem.unreleased_pages == 0 and mem.resident_pages == mem.accounted_pages == 6
        cache.evict(SliceKey(0, 0))
        cache.evict(SliceKey(0, 2))
        mem = cache.memory()
        assert mem.committed_pages == mem.resident_pages == mem.unreleased_pages == 0


@pytest.mark.parametrize("stride,first", [(2 * PAGE, 0), (1000, 37)])
def test_aligned_slots_own_whole_pages_so_both_rules_release_everything(tmp_path, stride, first):
    path, blobs = raw_blobs(tmp_path, stride, 8, first)
    for release in ("on", "off"):
        with ExpertCache(path, blobs, budget_bytes=3 * stride, placement="aligned", boundary_release=release) as c:
            churn(c, 100)
            mem = c.memory()
            assert mem.unreleased_pages == 0 and mem.resident_pages == mem.accounted_pages


@pytest.mark.parametrize("release", ["on", "off"])
def test_mincore_sees_exactly_what_the_cache_committed(tmp_path, release):
    path, blobs = raw_blobs(tmp_path, 3 * PAGE, 16, 1152)
    with ExpertCache(path, blobs, budget_bytes=6 * 3 * PAGE, boundary_release=release) as cache:
        for step in range(5):
            churn(cache, 30, seed=step)
            mem = cache.memory()
            assert mem.resident_pages == mem.committed_pages == mem.accounted_pages + mem.unreleased_pages
            assert (mem.unreleased_pages == 0) == (release == "on")


def test_budget_lru_and_pluggable_policy(tmp_path):
    path, blobs = raw_blobs(tmp_path, PAGE, 8, 64, layers=1)
    with pytest.raises(ParamError, match="cannot hold one expert slice"):
        ExpertCache(path, blobs, budget_bytes=PAGE - 1)
    for policy, survivor in (("lru", 0), (FifoPolicy(), 1)):
        with ExpertCache(path, blobs, budget_bytes=2 * PAGE, policy=policy) as cache:
            cache.stage(SliceKey(0, 0))
            cache.stage(SliceKey(0, 1))
            assert cache.stage(SliceKey(0, 0))  # a hit; LRU now keeps 0, FIFO still evicts it first
            cache.stage(SliceKey(0, 2))
            assert SliceKey(0, survivor) in cache and len(cache) == 2


def test_bad_arguments_are_one_line_param_errors(tmp_path):
    path, blobs = raw_blobs(tmp_path, PAGE, 4, 0, layers=1)
    for kw in ({"placement": "shifted"}, {"boundary_release": "maybe"}, {"reader": "mmap"}, {"policy": "mru"}):
        with pytest.raises(ParamError) as err:
            ExpertCache(path, blobs, budget_bytes=4 * PAGE, **kw)
        assert "\n" not in str(err.value)
    with pytest.raises(ParamError, match="not a MoE"):
        ExpertCache(path, (), budget_bytes=PAGE)
    empty = ExpertBlob(0, "up", 2, 0, True, ((0, 0), (0, 0)), ("t",))
    with pytest.raises(ParamError, match="empty expert slice"):
        ExpertCache(path, (empty,), budget_bytes=PAGE)


def test_inplace_layout_mirrors_the_file_remainder():
    blob = ExpertBlob(0, "up", 3, 216 * PAGE, True, tuple((1152 + e * 216 * PAGE, 216 * PAGE) for e in range(3)), ("t",))
    lay = layout_blob(blob, "inplace")
    assert lay.placement == "inplace" and lay.slots == tuple(1152 + e * 216 * PAGE for e in range(3))
    assert all(s % PAGE == off % PAGE for s, (off, _) in zip(lay.slots, blob.slices))
    assert lay.reserve >= lay.slots[-1] + 216 * PAGE + PAGE - 1152  # the last window fits


def test_inplace_reader_never_writes_past_the_region_it_was_given(tmp_path, odirect):
    if not odirect:
        pytest.skip("O_DIRECT not supported here")
    # The dense-loader overrun of the write-up: a page-aligned slice read into an exactly sized buffer
    # matches the remainder test with shift 0, and its whole-page window is longer than the buffer.
    path = tmp_path / "f.bin"
    data = np.random.default_rng(1).integers(0, 256, 4 * PAGE, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    reader = DirectInplaceReader(path)
    with AlignedBuffer(2 * PAGE) as buf:
        buf.view[:] = b"\xee" * (2 * PAGE)
        region = buf.view[:PAGE + 100]  # exactly the slice; sentinel bytes follow
        out = reader.read_into(region, 0, PAGE, PAGE + 100, allow_in_place=True)  # promised, yet too small
        region.release()
        assert bytes(buf.view[:PAGE + 100]) == data[PAGE:2 * PAGE + 100]
        assert bytes(buf.view[PAGE + 100:]) == b"\xee" * (PAGE - 100), "the window overran the region"
        assert not out.in_place and out.shift_copy_bytes == PAGE + 100 and reader.fallbacks == 1
        out = reader.read_into(buf.view, 0, PAGE, PAGE + 100)  # fits, but nothing was promised
        assert not out.in_place and out.shift_copy_bytes == PAGE + 100 and reader.fallbacks == 2
        out = reader.read_into(buf.view, 0, PAGE, PAGE + 100, allow_in_place=True)  # promised: in place
        assert out.in_place and out.shift_copy_bytes == 0
    reader.close()


def check_fallback(path: str, stride: int, n: int, first: int) -> None:
    blob = ExpertBlob(0, "up", n, stride, True, tuple((first + e * stride, stride) for e in range(n)), ("t",))
    reader, note = open_reader("direct-inplace", path)
    assert reader.name == "pread" and "O_DIRECT refused" in note
    reader.close()
    with ExpertCache(path, (blob,), budget_bytes=2 * stride) as cache:
        assert cache.facts.reader == "pread" and "O_DIRECT refused" in cache.facts.reader_note
        churn(cache, 12)
        check_live_bytes(cache, path)


def test_refused_o_direct_falls_back_to_pread_and_says_so(tmp_path, monkeypatch):
    import workbench.expert.readers as readers
    from workbench.registry import Availability

    path, (blob, _) = raw_blobs(tmp_path, 2 * PAGE, 4, 1152)
    monkeypatch.setattr(readers, "direct_io_support",
                        lambda p: Availability(False, "EINVAL on tmpfs (Invalid argument)"))
    check_fallback(path, 2 * PAGE, 4, 1152)


def test_tmpfs_without_o_direct(tmp_path):
    shm = "/dev/shm"
    if not os.path.isdir(shm) or direct_io_support(shm):
        pytest.skip("no tmpfs here, or tmpfs takes O_DIRECT (Linux >= 6.6)")
    stride, n = 2 * PAGE, 4
    path = os.path.join(shm, f"wb-test-{os.getpid()}.bin")
    try:
        with open(path, "wb") as fh:
            fh.write(np.random.default_rng(2).integers(0, 256, 1152 + n * stride + PAGE, dtype=np.uint8).tobytes())
        check_fallback(path, stride, n, 1152)
    finally:
        os.unlink(path)
