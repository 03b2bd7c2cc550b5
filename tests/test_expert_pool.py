"""placement=pool (issue 34 §5): expert slices in frames of one resident, page-locked pool, sent to the
device straight from it. Every landed slice is read back against the file over several layouts (page,
odd and tiny strides, a file gguf-py wrote), on a device whose asynchronous copies read their source only
when waited for (a frame reused before its copy ran would land another expert's bytes)."""
from __future__ import annotations

import numpy as np
import pytest
from device_fakes import DeferredCopyDevice
from moe_layouts import three_layouts

from workbench.errors import ParamError
from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.memory import PAGE
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig, check_config
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return three_layouts(tmp_path_factory.mktemp("pool"), seed=7)


def _session(index, device, **kw):
    slices = [n for b in index.blobs for _, n in b.slices]
    frame = -(-max(slices) // PAGE) * PAGE
    third = len(slices) // 3 * frame / 2**20  # frames for a third of the slices: hits and evictions both
    cfg = SessionConfig(turns=3, tokens=3, experts_per_token=2, distribution="zipf", verify=True, verify_end=True,
                        placement="pool", **{"cache_mib": third, **kw})
    with ExpertSession(index, device, cfg) as s:
        records = list(s.turns())
        s.finish_checks()
        return records, s.verified_slices, s


@pytest.mark.parametrize("model", ["page", "odd", "gguf-py"])
@pytest.mark.parametrize("kw", [dict(lanes=1), dict(lanes=3, overlap=True), dict(lanes=3, overlap=True, batch_misses=True),
                                dict(lanes=2, overlap=True, prefetch="previous"), dict(lanes=2, reader="direct-bounce")])
def test_every_slice_lands_the_files_bytes_from_its_frame(models, model, kw):
    records, verified, s = _session(models[model], DeferredCopyDevice(), **kw)
    assert sum(r.misses for r in records) > 0 and sum(r.hits for r in records) > 0
    assert sum(r.evictions for r in records) > 0  # frames were taken over by other experts
    assert verified >= sum(r.hits + r.misses for r in records)  # a wrong byte raised VerificationError
    assert s.facts.placement == "pool" and "pool:" in s.facts.placement_report


def test_the_pool_is_resident_from_the_start_never_released_and_locked_while_the_session_runs(models):
    device = HostDevice()
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=2, cache_mib=0.5, placement="pool", distribution="zipf")
    with ExpertSession(models["odd"], device, cfg) as s:
        pool = s.cache.pool
        largest = max(n for b in models["odd"].blobs for _, n in b.slices)
        assert pool.frame == -(-largest // PAGE) * PAGE and pool.frames == int(0.5 * 2**20) // pool.frame
        assert np.all(pool.mapping.resident_map())  # before the first miss
        assert device.usage().registered_bytes == pool.nbytes  # page-locked
        records = list(s.turns())
        mem = s.cache.memory()
    assert sum(r.evictions for r in records) > 0
    assert s.cache.counters().released_pages == 0
    assert mem.committed_pages == mem.resident_pages == pool.pages
    assert mem.unreleased_pages == pool.pages - mem.accounted_pages  # free frames and tails: by design
    assert device.usage().registered_bytes == 0  # unlocked when the session closed


@pytest.mark.parametrize("batch", [True, False])
def test_every_slice_goes_by_one_asynchronous_copy_straight_from_the_pool(models, batch):
    class Recording(HostDevice):
        copies: list = []

        def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
            self.copies.append((asynchronous, np.frombuffer(src, dtype=np.uint8).ctypes.data, len(src)))
            super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)

    device = Recording()
    device.copies = []
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=2, cache_mib=0.5, lanes=3, overlap=True,
                        batch_misses=batch, placement="pool", distribution="zipf")
    with ExpertSession(models["page"], device, cfg) as s:
        lo, hi = s.cache.pool.mapping.span
        records = list(s.turns())
    slices = sum(r.hits + r.misses for r in records)
    assert len(device.copies) == slices and all(a for a, _, _ in device.copies)
    assert all(lo <= addr and addr + n <= hi for _, addr, n in device.copies)  # no staging slot in between


def test_per_layer_caches_get_a_frame_for_each_entry_and_hit_as_the_page_book_does(models):
    index = models["page"]
    counts = {}
    for placement in ("aligned", "pool"):
        cfg = SessionConfig(turns=3, tokens=4, cache_experts=3, experts_per_token=2, policy="lfu",
                            placement=placement, distribution="zipf", verify=True)
        with ExpertSession(index, HostDevice(), cfg) as s:
            records = list(s.turns())
            if placement == "pool":
                assert s.cache.pool.frames == 3 * len(index.blobs)
        counts[placement] = [(r.hits, r.misses) for r in records]
    assert counts["pool"] == counts["aligned"]


@pytest.mark.parametrize("kw, needle", [
    (dict(reader="direct-inplace"), "direct-inplace"),
    (dict(release_advice="free"), "never hands pages back"),
    (dict(boundary_release="off"), "never hands pages back"),
])
def test_what_a_pool_cannot_do_is_one_line(kw, needle):
    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, placement="pool", **kw))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_device_that_refuses_to_lock_the_pool_is_one_line_and_leaves_nothing_open(models):
    class Refusing(HostDevice):
        def register_host(self, view):
            return None

    device = Refusing()
    with pytest.raises(ParamError) as err:
        ExpertSession(models["page"], device, SessionConfig(turns=1, tokens=1, placement="pool", cache_mib=0.5))
    assert "refused to page-lock" in str(err.value) and "\n" not in str(err.value)
    assert device.usage().buffers == 0


def test_a_budget_below_one_frame_is_refused_and_the_cache_evicts_for_a_frame_not_for_bytes(models):
    index = models["odd"]
    sizes = sorted({n for b in index.blobs for _, n in b.slices})
    with pytest.raises(ParamError, match="pool frame"):
        ExpertCache(index.path, index.blobs, budget_bytes=sizes[-1], placement="pool")  # a frame is whole pages
    frame = -(-sizes[-1] // PAGE) * PAGE
    with ExpertCache(index.path, index.blobs, budget_bytes=2 * frame, placement="pool") as cache:
        for e in range(3):  # three slices, two frames: the third evicts the first whatever their bytes
            cache.stage(SliceKey(0, e))
        assert cache.live_keys() == [SliceKey(0, 1), SliceKey(0, 2)]
        with cache.view(SliceKey(0, 2)) as got:
            off, n = cache.layouts[0].slice(2)
            with open(index.path, "rb") as fh:
                fh.seek(off)
                assert bytes(got) == fh.read(n)
