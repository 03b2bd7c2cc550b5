"""The session as a decode loop: lanes and overlap change where the time goes, never what is read or
landed; compute runs the experts' products on the device; the per-turn breakdown adds up; bytes come
from the source the counters say; a sharded model works file by file."""
from __future__ import annotations

import threading
import time

import pytest

import workbench.expert.lanes as lanes_module
from workbench.errors import ParamError
from workbench.expert.compute import expert_matrix, parse_compute
from workbench.expert.lanes import InflightMeter, LanePool
from workbench.expert.readers import make_reader
from workbench.expert.session import ExpertSession, SessionConfig
from workbench.io.direct import direct_io_support
from workbench.io.pagecache import evict_file_pages, warm_file
from workbench.upload.host import HostDevice

DECISIONS = ("hits", "misses", "evictions", "bytes_read", "landed_bytes", "unreleased_pages")


@pytest.fixture(scope="module")
def moe64(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)


def run(index, turns=3, tokens=4, **kw):
    cfg = SessionConfig(turns=turns, tokens=tokens, **({"cache_mib": 2, "experts_per_token": 4} | kw))
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        s.finish_checks()
        return records, s.report()


@pytest.fixture
def slow_reads(monkeypatch):
    """Every lane read takes at least 3 ms more (a slow disk), so overlap has something to hide."""
    def slow(kind, path):
        reader = make_reader(kind, path)
        inner = reader.read_into

        def read_into(*args, **kw):
            time.sleep(0.003)
            return inner(*args, **kw)
        reader.read_into = read_into
        return reader
    monkeypatch.setattr(lanes_module, "make_reader", slow)


@pytest.mark.parametrize("lanes,overlap", [(4, False), (1, True), (4, True)])
def test_lanes_and_overlap_read_and_land_the_same_bytes(moe64, lanes, overlap):
    inline, _ = run(moe64)
    other, report = run(moe64, lanes=lanes, overlap=overlap, verify_end=True)
    assert [[getattr(r, k) for k in DECISIONS] for r in other] == [[getattr(r, k) for k in DECISIONS] for r in inline]
    assert report.summary.verified_slices > 0  # every turn's last layer and the cache at the end, byte-exact
    assert report.summary.facts.lanes == lanes and report.summary.facts.overlap is overlap


def test_uploads_are_byte_exact_with_lanes_and_overlap(moe64):
    _, report = run(moe64, turns=2, tokens=2, lanes=3, overlap=True, verify=True, placement="bounce")
    s = report.summary
    assert s.verified_slices == s.hits + s.misses == 2 * 2 * 4 * len(moe64.blobs)


def test_overlap_hides_reads_behind_compute(moe64, slow_reads, monkeypatch):
    import workbench.expert.compute as compute_module

    sleeps: list[float] = []
    real_run = compute_module.SleepCompute.run

    def counted(self, *args, **kw):  # noqa: ANN001, ANN002, ANN003
        sleeps.append(self.per_layer)
        return real_run(self, *args, **kw)
    monkeypatch.setattr(compute_module.SleepCompute, "run", counted)
    # 100 ms a layer (2 layers): a layer's misses (~12 slow reads on 2 lanes, ~20 ms) fit behind the
    # compute with room for a loaded box's scheduling (30 ms a layer left little on a loaded 2-core VM)
    kw = dict(turns=2, tokens=3, compute="sleep:200", lanes=2, reader="pread")
    serial, _ = run(moe64, overlap=False, **kw)
    serial_sleeps, sleeps[:] = list(sleeps), []
    ahead, _ = run(moe64, overlap=True, **kw)
    read = lambda rs: sum(r.stall_read_s for r in rs[1:])  # noqa: E731
    busy = lambda rs: sum(r.read_busy_s for r in rs[1:])  # noqa: E731
    # each run's stall against its own reads in flight, not against the other run's (a loaded box moved
    # the serial run's read time 0.1-1.1 s between runs): serial waits them all out, ahead hides most
    assert read(serial) > 0.8 * busy(serial), (read(serial), busy(serial))
    assert read(ahead) < 0.6 * busy(ahead), (read(ahead), busy(ahead))
    # the same compute either way, counted (timed, a loaded box kept the overlapped run's main thread off
    # the interpreter after its sleeps: 2.32 s against 1.22 s, load 9): every layer's, and all of it timed
    assert serial_sleeps == sleeps == [0.1] * (2 * 3 * 2)
    for records in (serial, ahead):
        assert sum(r.compute_s for r in records) >= sum(sleeps) - 1e-3  # a sleep is never shorter


def test_lanes_read_in_parallel(moe64, slow_reads):
    # one lane, four, four, one (abba): a load burst or drift on a busy box falls on both sides; one run
    # each, four lanes once stalled 0.57x of one lane's time (loaded 2-core VM), expected ~0.25x
    stall = {1: 0.0, 4: 0.0}
    for lanes in (1, 4, 4, 1):
        _, report = run(moe64, turns=2, tokens=2, lanes=lanes, reader="pread", cache_mib=4)
        if lanes == 4:
            assert report.summary.read_queue_depth > 1.5  # four lanes kept more than one read in flight
        else:
            assert report.summary.read_queue_depth == pytest.approx(1.0, abs=0.05)
        stall[lanes] += report.summary.stall_read_s
    assert stall[4] < stall[1], stall


def test_the_turn_breakdown_adds_up(moe64):
    records, _ = run(moe64, compute="sleep:8", lanes=2, overlap=True)
    for r in records:
        parts = r.compute_s + r.stall_read_s + r.stall_upload_s + r.stall_route_s + r.bookkeeping_s + r.other_s
        assert parts == pytest.approx(r.seconds, rel=0.02, abs=1e-3)
        assert r.bookkeeping_s > 0  # the cache's lookups, admissions and unpins, timed on their own
        assert r.residual_s_per_token == pytest.approx((r.seconds - r.stall_s - r.bookkeeping_s) / r.tokens, rel=1e-6)
        assert r.compute_s >= 0.008 * r.tokens * 0.9
        assert r.hit_rate == pytest.approx(r.hits / (r.hits + r.misses))
        assert r.hit_bytes_per_token * r.tokens + r.bytes_read == r.landed_bytes


def test_bytes_by_source_follow_the_page_cache(moe64):
    if not direct_io_support(moe64.path):
        pytest.skip("O_DIRECT not supported where the model lies")
    evict_file_pages(moe64.path)
    cold, _ = run(moe64, turns=2, placement="bounce")  # O_DIRECT: every miss from the disk
    for r in cold:
        assert r.disk_bytes_per_token * r.tokens >= 0.95 * r.io_bytes > 0
        assert r.page_cache_bytes_per_token * r.tokens < 0.05 * r.io_bytes + (64 << 10)
    warm_file(moe64.path)
    warm, _ = run(moe64, turns=2, reader="pread")  # buffered, resident: the page cache serves it
    for r in warm:
        assert r.disk_bytes_per_token == 0
        assert r.page_cache_bytes_per_token * r.tokens >= r.io_bytes > 0


def test_device_compute_runs_the_experts_products(synth_model):
    st = synth_model("safetensors", "moe", size=3 << 20, experts=8)
    records, report = run(st, turns=2, tokens=2, compute="device", experts_per_token=2, cache_mib=None)
    f = report.summary.facts
    assert f.compute.startswith("device (numpy") and "F16 as they are" in f.compute and "proxy" not in f.compute
    assert all(r.compute_s > 0 for r in records)
    gguf = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    _, rep = run(gguf, turns=1, tokens=1, compute="device")
    assert "Q4_0 as a same-bytes f32 proxy (× 7 columns = 0.98× the FLOPs)" in rep.summary.facts.compute


def test_expert_matrix_real_and_proxy(synth_model):
    gguf = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    tensors = {t.name: t for t in gguf.tensors}
    blob = gguf.blobs[0]
    t = tensors[blob.tensors[0]]
    rows, cols = t.shape[1], t.shape[2]
    m = expert_matrix(blob, tensors, ("f16", "bf16", "f32"), "f16")
    assert m.proxy and m.file_dtype == "Q4_0" and m.batch == 4  # 32/9 of the f16 view's columns, rounded
    assert m.rows * m.cols * 2 <= blob.slices[0][1] and m.flop_ratio == pytest.approx(4 * 9 / 32, rel=0.01)
    assert 2 * m.rows * m.cols * m.batch == pytest.approx(2 * rows * cols * m.flop_ratio, rel=1e-6)
    st = synth_model("safetensors", "moe", size=3 << 20, experts=8)
    tensors = {t.name: t for t in st.tensors}
    real = expert_matrix(st.blobs[0], tensors, ("f16", "f32"), "f32")
    first = tensors[st.blobs[0].tensors[0]]
    assert not real.proxy and (real.rows, real.cols, real.dtype) == (*first.shape, "f16")


@pytest.mark.parametrize("text", ["sleep", "sleep:-1", "device:1", "gpu", "sleep:nan"])
def test_bad_compute_is_one_line(text):
    with pytest.raises(ParamError, match="compute"):
        parse_compute(text)
    assert parse_compute("sleep:2.5") == ("sleep", 2.5) and parse_compute("none") == ("none", 0.0)


def test_sharded_model_reads_every_file(sharded_model):
    for fmt in ("gguf", "safetensors"):
        index = sharded_model(fmt, "moe", shards=3, size=3 << 20, alignment=64 if fmt == "gguf" else 32)
        assert len({b.file for b in index.blobs}) > 1
        _, report = run(index, turns=2, tokens=3, experts_per_token=2, cache_mib=None, lanes=2, verify=True)
        s = report.summary
        assert s.facts.files == len({b.file for b in index.blobs}) and s.verified_slices == s.hits + s.misses > 0


def test_inflight_meter_measures_depth():
    meter, pool = InflightMeter(), LanePool(3)
    barrier = threading.Barrier(3)

    def job(_reader):
        barrier.wait()
        time.sleep(0.5)  # long beside the lanes' start spread (tens of ms on a loaded box: 2.16 at 50 ms)
        return None
    before = pool.meter.snapshot()
    handles = [pool.submit(job, "pread", __file__) for _ in range(3)]
    for h in handles:
        pool.wait(h)
    d = pool.meter.snapshot().minus(before)
    pool.close()
    assert d.reads == 3 and d.depth == pytest.approx(3.0, rel=0.2)
    assert meter.snapshot().reads == 0 and meter.snapshot().depth == 0.0


def test_a_budget_below_a_layer_in_flight_stops_with_one_line(moe64):
    one_layer = 4 * sum(b.slices[0][1] for b in moe64.blobs if b.layer == moe64.blobs[0].layer)
    cfg = SessionConfig(turns=1, tokens=2, cache_mib=(one_layer // 2) / 2**20, experts_per_token=4, lanes=2)
    with ExpertSession(moe64, HostDevice(), cfg) as s:
        assert any("cannot hold one layer" in w for w in s.facts.warnings)
        with pytest.raises(ParamError, match="in use at once"):
            list(s.turns())


def test_the_gate_reads_resident_misses_buffered_per_blob_or_once_per_file(moe64):
    if not direct_io_support(moe64.path):
        pytest.skip("O_DIRECT not supported where the model lies: every reader is buffered already")
    warm_file(moe64.path)
    records, report = run(moe64, turns=2, gate=0.9, gate_scope="blob")
    assert sum(r.gated_reads for r in records) == sum(r.misses for r in records) > 0  # resident: page cache serves
    assert report.summary.facts.gate == "0.9 per blob (at every miss)"
    # the page cache serves them: what came from the disk is at most what a 0.9 gate lets through (the
    # pages the machine reclaimed since warm_file — under a parallel suite — and the process's own other
    # reads; read_bytes counts every file), never the misses' bytes themselves as O_DIRECT would
    disk = sum(r.disk_bytes_per_token * r.tokens for r in records)
    assert disk <= 0.1 * sum(r.bytes_read for r in records), (disk, [r.bytes_read for r in records])
    evict_file_pages(moe64.path)
    records, report = run(moe64, turns=2, gate=0.9, gate_scope="file")
    assert sum(r.gated_reads for r in records) == 0  # cold when the process started: never gated again
    assert report.summary.facts.gate.startswith("0.9 per file (once, at the start: below)")
    records, _ = run(moe64, turns=2)
    assert sum(r.gated_reads for r in records) == 0
