"""The ``experts`` strategy and its per-expert baseline (``pread granularity=expert``): bytes verified per
tensor out of shared blob buffers, one residency probe per load, and facts that name what engaged.
The borrowed-slice modes (``upload=pageable|registered|pinned``) here; the staged default in
test_strategies_experts_staged.py."""
from __future__ import annotations

import dataclasses

import pytest

from workbench.errors import ParamError
from workbench.formats.index import ExpertBlob
from workbench.io.pagecache import prepare
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.upload import open_device

PAGE = 4096


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def load(name, index, device="host", **params):
    if name == "experts":
        params.setdefault("upload", "pageable")  # the borrowed-slice path (the default is staged)
    dev = open_device(device)
    result = get_strategy(name)(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok and report.checked == report.total == len(index), (report.first_mismatch, report.detail)
    assert result.bytes_moved == index.nbytes
    return result, dev


def with_blobs(index, groups, stride):
    """``index`` with hand-made blobs: each group is a list of tensor positions (one expert each)."""
    blobs = []
    for layer, members in enumerate(groups):
        ts = [index.tensors[i] for i in members]
        blobs.append(ExpertBlob(layer, "up", len(ts), stride, False, tuple((t.offset, t.nbytes) for t in ts),
                                tuple(t.name for t in ts)))
    return dataclasses.replace(index, blobs=tuple(blobs))


@pytest.mark.parametrize("fmt,layout", [("gguf", "stacked"), ("safetensors", "split"), ("safetensors", "stacked")])
def test_warm_blobs_go_up_in_one_borrowed_copy_each(fmt, layout, tmp_path):
    from workbench.formats.synth import write_synthetic

    index = write_synthetic(tmp_path / f"m.{fmt}", format=fmt, layout="moe", size=3 << 20, experts=8,
                            alignment=64, expert_layout=layout)
    prepare(index.path, "warm")
    result, _ = load("experts", index)
    blobs = result.engaged_by("blob_zero_copy")
    assert (blobs.done, blobs.total, blobs.state) == (len(index.blobs), len(index.blobs), "ON")
    assert result.counters["residency_probes"] == 1 and result.counters["contiguity_probes"] == len(index.blobs)
    # every blob's tensors share its one device buffer
    by_buffer = {}
    for p in result.placements:
        by_buffer.setdefault(id(p.buffer), []).append(p.tensor)
    experts = {n for b in index.blobs for n in b.tensors}
    assert sorted(len(v) for v in by_buffer.values() if set(v) <= experts) == sorted(len(b.tensors) for b in index.blobs)


def test_cold_blobs_stay_below_the_gate_and_go_through_the_lanes(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "cold")
    result, _ = load("experts", index, threads=2, chunk_mib=1)
    blobs = result.engaged_by("blob_zero_copy")
    assert blobs.state == "INERT" and blobs.note == f"{len(index.blobs)} below gate 90%"
    assert result.engaged_by("lanes").state == "ON" and result.path["readers"] == 2
    prepare(index.path, "cold")
    ungated, _ = load("experts", index, gate=0.0)  # the seed's ungated first cut: borrowed slices off disk
    assert ungated.engaged_by("blob_zero_copy").state == "ON" and ungated.engaged_by("lanes") is None


def test_a_blob_with_gaps_is_named_not_contiguous(raw_model):
    # layer 0: four back-to-back experts; layer 1: experts 64 B apart — no single range to borrow
    index = raw_model([PAGE] * 4, first=128, tail=64)
    gapped = raw_model([PAGE] * 4, first=128, gap=64, tail=64)
    both = dataclasses.replace(index, tensors=index.tensors, blobs=with_blobs(index, [[0, 1, 2, 3]], PAGE).blobs)
    prepare(both.path, "warm")
    result, _ = load("experts", both)
    assert str(result.engaged_by("blob_zero_copy")) == "blob_zero_copy: 1/1 blobs — ON"
    split = with_blobs(gapped, [[0, 1], [2, 3]], PAGE + 64)
    prepare(split.path, "warm")
    result, _ = load("experts", split)
    assert str(result.engaged_by("blob_zero_copy")) == "blob_zero_copy: 0/2 blobs — INERT (2 not contiguous)"
    assert any("expert 1 starts 64 B after expert 0 ends" in n for n in result.notes)


def test_partial_when_some_blobs_are_contiguous(raw_model):
    # experts 0-3 back to back, then 64 B of padding, then experts 4-5 with a gap between them
    sizes = [PAGE] * 4
    index = raw_model(sizes + [64, PAGE, 16, PAGE], first=320, tail=10)
    index = with_blobs(index, [[0, 1, 2, 3], [5, 7]], PAGE)
    prepare(index.path, "warm")
    result, _ = load("experts", index)
    assert str(result.engaged_by("blob_zero_copy")) == "blob_zero_copy: 1/2 blobs — PARTIAL (1 not contiguous)"
    assert result.engaged_by("dense_zero_copy").total == 2  # the two filler tensors go their own way


def test_eviction_policy_drops_the_mapping(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    result, _ = load("experts", index, device="host-uma")
    fact = result.engaged_by("blob_zero_copy")
    assert fact.state == "INERT" and fact.note.startswith("eviction policy on (device-uma)")
    assert "residency_probes" not in result.counters and result.counters["dontneed_calls"] > 0


@pytest.mark.parametrize("upload", ["pageable", "pinned", "registered"])
@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_every_upload_mode_lands_the_file_bytes(synth_model, upload, cache):
    index = synth_model("safetensors", "moe")
    prepare(index.path, cache)
    result, _ = load("experts", index, upload=upload, threads=2, chunk_mib=1)
    if upload == "registered" and cache == "warm":
        assert result.engaged_by("registered_mapping") is not None


def test_one_residency_probe_per_load_however_many_blobs(synth_model, monkeypatch):
    import workbench.strategies.experts as experts

    calls = []
    real = experts.resident_map
    monkeypatch.setattr(experts, "resident_map", lambda *a: calls.append(a) or real(*a))
    index = synth_model("gguf", "moe", alignment=64, size=4 << 20, experts=16)
    assert len(index.blobs) >= 6
    load("experts", index)
    assert len(calls) == 1


def test_verification_checks_each_tensor_in_a_shared_blob_buffer(synth_model):
    index = synth_model("safetensors", "moe")
    prepare(index.path, "warm")
    result, dev = load("experts", index)
    blob = index.blobs[1]
    victim = next(p for p in result.placements if p.tensor == blob.tensors[3])
    victim.buffer.handle[victim.offset + 5] ^= 0xFF  # one byte of the fourth expert, in the shared buffer
    report = verify_placements(index, dev, result.placements)
    assert report.mismatches == 1 and report.first_mismatch == blob.tensors[3]


def test_per_expert_pread_reads_each_expert_on_its_own(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    result, _ = load("pread", index, granularity="expert")
    experts = sum(b.n_experts for b in index.blobs)
    others = len(index) - len(index.blobs)
    assert result.engaged_by("heap_copy").note.startswith(f"per expert: {experts + others} reads")
    whole, _ = load("pread", index)
    assert whole.engaged_by("heap_copy").note.startswith("every tensor")


def test_bad_params_are_one_line_errors():
    for name, raw in (("experts", {"gate": "1.5"}), ("experts", {"upload": "zero"}), ("experts", {"threads": "0"}),
                      ("experts", {"staging": "wcc"}), ("experts", {"provision": "later"}), ("experts", {"spare": "-1"}),
                      ("experts", {"mapping": "many"}),
                      ("pread", {"granularity": "layer"}), ("pread", {"granularity": "expert", "upload": "pinned"})):
        with pytest.raises(ParamError) as err:
            get_strategy(name).from_strings(raw)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name,params", [("experts", {"upload": "registered"}), ("experts", {"upload": "pinned"}),
                                         ("experts", {}), ("experts", {"staging": "wc"}),
                                         ("pread", {"granularity": "expert"}), ("odirect", {"mode": "inplace"})])
def test_the_gpu_backend_call_shapes_on_the_fake_cuda_runtime(synth_model, name, params):
    # the H200 runs these through upload/_gpu.py; the fake runtime checks every call and copies for real
    from test_upload_devices import open_fake

    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    dev, fake = open_fake("cuda")
    try:
        result = get_strategy(name)(**params).load(index, dev)
        report = verify_placements(index, dev, result.placements)
        assert report.ok and report.checked == len(index), report.detail
        if params.get("upload") == "registered":
            assert result.engaged_by("registered_mapping").state == "ON" and not fake.registered  # unregistered
    finally:
        dev.close()


def test_a_session_on_the_fake_cuda_runtime_uploads_exact_bytes(synth_model):
    from test_upload_devices import open_fake

    from workbench.expert.session import ExpertSession, SessionConfig

    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    dev, _ = open_fake("cuda")
    with dev, ExpertSession(index, dev, SessionConfig(turns=2, tokens=2, cache_mib=0.5, experts_per_token=2,
                                                      verify=True)) as session:
        records = list(session.turns())
    assert session.verified_slices == sum(r.hits + r.misses for r in records) > 0
