"""Issue 34 §5: a layer's misses read and uploaded together (``--batch-misses``): every landed slice
byte for byte the file's, the same hits, misses and bytes as the unbatched session, both arena halves
used, and the settings it cannot run with refused in one line."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ParamError
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / "moe.gguf"
    write_synthetic(path, format="gguf", layout="moe", size=8 << 20, experts=16, alignment=4096, seed=2)
    return open_index(path)


def _run(index, **kw):
    cfg = SessionConfig(turns=3, tokens=4, experts_per_token=4, cache_mib=3, distribution="zipf", verify=True,
                        verify_end=True, **kw)
    with ExpertSession(index, HostDevice(), cfg) as s:
        ats = []
        if s.decoder.batch is not None:  # every arena offset each layer landed at
            land = s.decoder.batch.land
            s.decoder.batch.land = lambda d, plan: ats.append(sorted(plan.at.values())) or land(d, plan)
        records = list(s.turns())
        s.finish_checks()
        return records, s.verified_slices, ats, s.decoder.batch


@pytest.mark.parametrize("lanes, overlap", [(3, False), (2, True), (4, True)])
@pytest.mark.parametrize("placement", ["inplace", "bounce"])
def test_batched_misses_land_the_files_bytes_as_unbatched_does(moe, lanes, overlap, placement):
    plain, plain_verified, _, _ = _run(moe, lanes=lanes, overlap=overlap, placement=placement)
    batched, verified, ats, batch = _run(moe, lanes=lanes, overlap=overlap, placement=placement, batch_misses=True)
    assert verified == plain_verified > 0  # every upload read back against the file, as many as unbatched
    for a, b in zip(plain, batched):
        assert (a.hits, a.misses, a.bytes_read, a.landed_bytes) == (b.hits, b.misses, b.bytes_read, b.landed_bytes)
    assert sum(r.misses for r in batched) > 0 and sum(r.hits for r in batched) > 0
    half = batch.layer_bytes
    assert {at[0] for at in ats} == {0, half}  # the two halves alternate: one computes while one lands
    assert all(a < half for a in ats[0]) and all(half <= a < 2 * half for a in ats[1])


@pytest.mark.parametrize("kw, needle", [
    (dict(lanes=1, overlap=False), "needs reader lanes"),
    (dict(lanes=2, overlap=True, prefetch="previous"), "--prefetch route"),
    (dict(lanes=3, overlap=True, uploader="pinned"), "own page-locked slots"),
    (dict(lanes=3, overlap=True, upload_threads=2), "own page-locked slots"),
])
def test_settings_batching_cannot_run_with_are_one_line(moe, kw, needle):
    from workbench.expert.session_config import check_config

    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, batch_misses=True, **kw))
    assert needle in str(err.value) and "\n" not in str(err.value)



# --- the lanes' page-locked slots (workbench.expert.miss.lane_stage) ------------------------------------

def _tiny_gguf(path):
    """Experts of 288 B (Q4_0), 1,024 B (F16) and 2,048 B (F32) by gguf-py's writer: tiny, none a page."""
    import numpy as np
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    from foreign_writers import write_gguf_moe

    def add(writer):
        rng = np.random.default_rng(5)
        for layer in range(3):
            w = rng.standard_normal((8, 8, 64)).astype(np.float32)
            writer.add_tensor(f"blk.{layer}.ffn_gate_exps.weight", quantize(w, Q.Q4_0), raw_dtype=Q.Q4_0)
            writer.add_tensor(f"blk.{layer}.ffn_up_exps.weight", w.astype(np.float16))
            writer.add_tensor(f"blk.{layer}.ffn_down_exps.weight", w)

    return open_index(write_gguf_moe(path, add, blocks=3, experts=8, used=2))


@pytest.fixture(scope="module")
def odd_models(tmp_path_factory, moe):
    d = tmp_path_factory.mktemp("odd")
    odd = open_index(write_synthetic(d / "odd.gguf", format="gguf", layout="moe", size=4 << 20, experts=16,
                                     alignment=32, expert_stride="odd", seed=4).path)
    return {"page": moe, "odd": odd, "gguf-py": _tiny_gguf(d / "tiny.gguf")}


def _staged(index, slot_bytes, **kw):
    """A batched session whose lanes stage through slots of ``slot_bytes``: records, slices verified."""
    from workbench.expert.miss.lane_stage import LaneStaging

    cfg = SessionConfig(turns=3, tokens=3, experts_per_token=2, cache_mib=kw.pop("cache_mib", 0.01), verify=True,
                        verify_end=True, distribution="zipf", **kw)
    device = HostDevice()
    with ExpertSession(index, device, cfg) as s:
        if slot_bytes and s.decoder.batch is not None:
            s.decoder.batch.staging.close()
            s.decoder.batch.staging = LaneStaging(device, cfg.lanes, slot_bytes=slot_bytes)
        records = list(s.turns())
        s.finish_checks()
        tally = s.decoder.batch.tally if s.decoder.batch is not None else None
        return records, s.verified_slices, tally


@pytest.mark.parametrize("model", ["page", "odd", "gguf-py"])
@pytest.mark.parametrize("slot_bytes", [300, 5000, None])  # slices split across slots; several a slot; 4 MiB
def test_slots_of_any_size_land_every_slice_byte_for_byte(odd_models, model, slot_bytes):
    index = odd_models[model]
    kw = dict(lanes=3, overlap=True, cache_mib=0.04 if model == "gguf-py" else 1.5)
    plain, plain_verified, _ = _staged(index, None, **kw)
    batched, verified, tally = _staged(index, slot_bytes, batch_misses=True, **kw)
    assert verified == plain_verified > 0
    assert [(r.hits, r.misses, r.bytes_read, r.landed_bytes) for r in batched] == \
        [(r.hits, r.misses, r.bytes_read, r.landed_bytes) for r in plain]
    assert sum(r.misses for r in batched) > 0 and sum(r.hits for r in batched) > 0
    assert tally.slices == sum(r.hits + r.misses for r in batched)
    assert tally.nbytes == sum(r.landed_bytes for r in batched)
    if slot_bytes == 300:  # the 1,024 and 2,048 B slices went in pieces
        assert tally.copies > tally.slices


class _Slices:
    """A stand-in cache: slice ``k`` is ``sizes[k]`` bytes of value ``k + 1``."""

    def __init__(self, sizes):
        self.sizes = sizes

    def view(self, key):
        return memoryview(bytes([key + 1]) * self.sizes[key])

    def fill(self, key, reader):
        return ("filled", key)


def test_a_gap_wider_than_the_padding_is_never_written_and_a_slot_carries_several_slices():
    from workbench.expert.miss.lane_stage import LaneStaging

    device = HostDevice()
    arena = device.alloc(20000)
    device.copy_h2d(arena, 0, bytes([0xEE]) * 20000)
    sizes = {0: 1000, 1: 1000, 2: 1000, 3: 700}
    at = {0: 0, 1: 1024, 2: 2048, 3: 5000}  # 0-2 back to back at 256 B; 3 after a gap the slot could hold
    stage = LaneStaging(device, 1, slot_bytes=16384)
    try:
        outcomes, tally = stage.send(_Slices(sizes), "reader", [0, 1, 2, 3], at, arena)
    finally:
        stage.close()
    got = device.read_back(arena, 0, 20000)
    for k, n in sizes.items():
        assert got[at[k]:at[k] + n] == bytes([k + 1]) * n
    assert got[3048:5000] == bytes([0xEE]) * 1952  # past slice 2, the padding and the gap: untouched
    assert got[5700:] == bytes([0xEE]) * (20000 - 5700)
    assert outcomes == [("filled", k) for k in range(4)]
    assert (tally.slices, tally.copies, tally.nbytes) == (4, 2, 3700)  # 0-2 in one slot, 3 in its own


class _Recording(HostDevice):
    """The host device, noting each copy into device memory: asynchronous or not, from where."""

    def __init__(self):
        super().__init__()
        self.copies = []

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        import numpy as np

        self.copies.append((asynchronous, np.frombuffer(src, dtype=np.uint8).ctypes.data, len(src)))
        super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)


def test_batched_layers_reach_the_device_from_page_locked_slots_one_copy_a_slot(moe):
    """The cause the H200 showed (a synchronous pageable copy per slice, queued in the driver) is gone:
    every copy a batched layer makes is asynchronous, from the staging ring, and there are fewer copies
    than slices."""
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=4, cache_mib=3, lanes=3, overlap=True,
                        batch_misses=True, distribution="zipf")
    device = _Recording()
    with ExpertSession(moe, device, cfg) as s:
        device.copies.clear()
        records = list(s.turns())
        ring = getattr(getattr(s.decoder.batch, "staging", None), "ring", None)
        slots = [(int(np.frombuffer(slot.view, dtype=np.uint8).ctypes.data), len(slot.view))
                 for slot in (ring.slots if ring is not None else [])]
        copies = list(device.copies)
    slices = sum(r.hits + r.misses for r in records)
    assert copies and all(a for a, _, _ in copies)
    assert all(any(lo <= addr and addr + n <= lo + size for lo, size in slots) for _, addr, n in copies)
    assert len(copies) < slices


@pytest.mark.parametrize("slot_bytes", [300, 5000, None])
def test_a_slot_is_refilled_only_after_its_copy_ran(odd_models, slot_bytes):
    """On a device whose asynchronous copies run only when waited for (reading their source then), a
    slot refilled before its fence would land another slice's bytes: every slice is verified."""
    from device_fakes import DeferredCopyDevice
    from workbench.expert.miss.lane_stage import LaneStaging

    index = odd_models["odd"]
    cfg = SessionConfig(turns=3, tokens=3, experts_per_token=2, cache_mib=1.5, lanes=3, overlap=True,
                        batch_misses=True, verify=True, verify_end=True, distribution="zipf")
    device = DeferredCopyDevice()
    with ExpertSession(index, device, cfg) as s:
        if slot_bytes:
            s.decoder.batch.staging.close()
            s.decoder.batch.staging = LaneStaging(device, cfg.lanes, slot_bytes=slot_bytes)
        records = list(s.turns())
        s.finish_checks()
        verified = s.verified_slices  # a difference raised VerificationError
    assert verified >= sum(r.hits + r.misses for r in records) > 0


def test_a_batched_session_on_the_fake_cuda_runtime_lands_exact_bytes(moe):
    """The H200 runs the lanes' slots through upload/_gpu.py: the fake runtime checks every call
    (registration, asynchronous copies on the stream, events) and copies for real."""
    from test_upload_devices import open_fake

    dev, _ = open_fake("cuda")
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=4, cache_mib=3, lanes=3, overlap=True,
                        batch_misses=True, verify=True, distribution="zipf")
    with dev, ExpertSession(moe, dev, cfg) as session:
        records = list(session.turns())
        tally = session.decoder.batch.tally
    assert session.verified_slices == sum(r.hits + r.misses for r in records) > 0
    assert 0 < tally.copies < tally.slices


def test_a_read_failing_on_a_lane_fails_the_layer_and_the_session_closes_clean(moe):
    """Every other run is waited for, the device drained, the cache's views and the slots released: the
    session's close (the ring's, the cache's) then raises nothing and nothing stays pinned."""
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=4, cache_mib=3, lanes=3, overlap=True,
                        batch_misses=True, distribution="zipf")
    s = ExpertSession(moe, HostDevice(), cfg)
    fill, calls = s.cache.fill, []

    def failing(key, reader):
        calls.append(key)
        if len(calls) == 7:
            raise OSError(5, "injected read error")
        return fill(key, reader)

    s.cache.fill = failing
    with pytest.raises(OSError, match="injected"):
        list(s.turns())
    assert not s.cache._pins  # every key the failed layer pinned was let go
    s.close()  # the ring's slots and the cache's maps: no view left behind (a BufferError here)
