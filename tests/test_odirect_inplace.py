"""``odirect mode=inplace``: expert blobs read straight into placed reservations with zero shift-copy
bytes where placement engages (alignment 64), declined per blob with the reason where it cannot
(alignment 32, strides off the page), the same bytes as ``mode=bounce`` — and the facts say which."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import xxhash

from workbench.errors import ParamError
from workbench.formats.index import ExpertBlob
from workbench.io.direct import direct_io_support
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.upload import open_device

PAGE = 4096


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


@pytest.fixture(scope="module")
def odirect(tmp_path_factory) -> None:
    if not direct_io_support(tmp_path_factory.mktemp("od")):
        pytest.skip("O_DIRECT is refused where the test files lie")


def load(index, **params):
    dev = open_device("host")
    result = get_strategy("odirect")(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok and report.checked == report.total == len(index), (report.first_mismatch, report.detail)
    digests = {p.tensor: xxhash.xxh3_64(dev.read_back(p.buffer, p.offset, p.nbytes)).hexdigest()
               for p in result.placements}
    return result, digests


def blob_bytes(index) -> int:
    return sum(b.nbytes for b in index.blobs)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("fmt,layout", [("gguf", "stacked"), ("safetensors", "split"), ("safetensors", "stacked")])
def test_alignment_64_places_every_blob_with_zero_expert_shift_copy(odirect, tmp_path, fmt, layout, threads):
    from workbench.formats.synth import write_synthetic

    index = write_synthetic(tmp_path / f"m.{fmt}", format=fmt, layout="moe", size=3 << 20, experts=8,
                            alignment=64, expert_layout=layout)
    inplace, same = load(index, mode="inplace", threads=threads, bounce_mib=1)
    bounce, digests = load(index, mode="bounce", threads=threads, bounce_mib=1)
    assert same == digests  # the same bytes land in both modes
    fact = inplace.engaged_by("odirect-zero-copy")
    n = len(index.blobs)
    if all(b.offset % 64 == 0 for b in index.blobs):  # GGUF at alignment 64 always; safetensors packs freely
        assert str(fact).startswith(f"odirect-zero-copy: {n}/{n} layer buffers placed — ON")
        assert inplace.counters["expert_shift_copy_bytes"] == 0
        assert inplace.counters["inplace_bytes"] == blob_bytes(index)
    assert bounce.engaged_by("odirect-zero-copy").state == "INERT"
    assert "mode=bounce" in bounce.engaged_by("odirect-zero-copy").note
    assert inplace.counters["shift_copy_bytes"] <= bounce.counters["shift_copy_bytes"]


def test_alignment_32_declines_every_blob_and_says_why(odirect, synth_model):
    index = synth_model("gguf", "moe", alignment=32)
    result, _ = load(index, mode="inplace")
    fact = result.engaged_by("odirect-zero-copy")
    assert fact.state == "INERT" and fact.done == 0 and fact.total == len(index.blobs)
    assert "would under-align tensors (not a multiple of 64 B)" in fact.note
    assert result.counters["expert_shift_copy_bytes"] > 0 and "inplace_bytes" not in result.counters


def raw_blobs(raw_model, strides: list[int], first: int):
    """Blobs of 4 experts each, ``stride`` bytes apart, in one random file, one after the other."""
    sizes = [s for s in strides for _ in range(4)]
    index = raw_model(sizes, first=first, tail=PAGE + 77)
    blobs = []
    for b, s in enumerate(strides):
        ts = index.tensors[4 * b:4 * b + 4]
        blobs.append(ExpertBlob(b, "down", 4, s, True, tuple((t.offset, t.nbytes) for t in ts),
                                tuple(t.name for t in ts)))
    return dataclasses.replace(index, blobs=tuple(blobs))


def test_a_stride_off_the_page_declines_that_blob_only(odirect, raw_model):
    # 1152 B past a page (the write-up's remainder); blob 1's stride is no page multiple
    index = raw_blobs(raw_model, [2 * PAGE, PAGE + 40, 3 * PAGE], first=1152)
    result, _ = load(index, mode="inplace")
    fact = result.engaged_by("odirect-zero-copy")
    assert (fact.done, fact.total, fact.state) == (1, 3, "PARTIAL")
    assert "layer 1 down experts: stride 4136 B is not a multiple of the 4096 B block" in fact.note
    # blob 2 sits after blob 1's odd stride: its remainder is no longer a multiple of 64 either
    assert "(+1 more)" in fact.note
    assert result.counters["inplace_bytes"] == 4 * 2 * PAGE


def test_remainder_zero_is_a_placement_not_a_decline(odirect, raw_model):
    # page-aligned blobs: the window of the last expert ends exactly at the blob's end; the reservation
    # still carries its slack page (the write-up's second latent bug), and nothing is shifted
    index = raw_blobs(raw_model, [2 * PAGE, 3 * PAGE], first=0)
    result, _ = load(index, mode="inplace", bounce_mib=1)
    assert result.engaged_by("odirect-zero-copy").state == "ON"
    assert result.counters["shift_copy_bytes"] == 0


def test_a_dense_page_aligned_model_never_overruns(odirect, synth_model):
    # the dense loader's overrun: page-aligned tensors in exactly sized buffers are never promised
    index = synth_model("gguf", "dense", alignment=4096)
    result, _ = load(index, mode="inplace")
    assert str(result.engaged_by("odirect-zero-copy")).startswith("odirect-zero-copy: 0/0 layer buffers placed — INERT")
    assert result.engaged_by("odirect").state == "ON"


def test_a_reader_that_cannot_land_in_place_is_not_counted_as_placed(odirect, synth_model, monkeypatch):
    from workbench.expert import readers

    real = readers.DirectInplaceReader.read_into
    monkeypatch.setattr(readers.DirectInplaceReader, "read_into",
                        lambda self, region, at, offset, n, allow_in_place=False: real(self, region, at, offset, n))
    index = synth_model("gguf", "moe", alignment=64)
    result, _ = load(index, mode="inplace")  # the promise withheld: every read bounces, bytes still right
    fact = result.engaged_by("odirect-zero-copy")
    assert fact.done == 0 and "could not land in place" in fact.note
    assert result.counters["expert_shift_copy_bytes"] > 0


def test_refused_o_direct_reads_inert_in_both_facts(synth_model, monkeypatch):
    import workbench.io.direct as direct
    from workbench.registry import Availability

    # the file opens O_DIRECT, then its first read is refused (as on some file systems)
    monkeypatch.setattr(direct, "direct_read_works", lambda fd, p: Availability(False, "EINVAL on tmpfs"))
    index = synth_model("gguf", "moe", alignment=64)
    result, _ = load(index, mode="inplace")
    assert result.engaged_by("odirect").state == "INERT"
    fact = result.engaged_by("odirect-zero-copy")
    assert fact.state == "INERT" and "O_DIRECT refused (EINVAL on tmpfs)" in fact.note


def test_exactly_sized_region_never_written_past_even_when_promised(odirect, tmp_path):
    from workbench.expert.readers import DirectInplaceReader
    from workbench.io.direct import AlignedBuffer

    data = np.random.default_rng(3).integers(0, 256, 3 * PAGE, dtype=np.uint8).tobytes()
    (tmp_path / "d.bin").write_bytes(data)
    reader = DirectInplaceReader(tmp_path / "d.bin")
    with AlignedBuffer(2 * PAGE) as buf:
        buf.view[:] = b"\x5a" * (2 * PAGE)
        region = buf.view[:PAGE + 8]  # a page-aligned tensor of PAGE + 8 B, its buffer exactly that size
        out = reader.read_into(region, 0, PAGE, PAGE + 8, allow_in_place=True)
        region.release()
        assert bytes(buf.view[:PAGE + 8]) == data[PAGE:2 * PAGE + 8] and not out.in_place
        assert bytes(buf.view[PAGE + 8:]) == b"\x5a" * (PAGE - 8), "the window ran past the buffer's end"
    reader.close()


def test_mode_is_checked():
    with pytest.raises(ParamError, match="mode"):
        get_strategy("odirect").from_strings({"mode": "zero"})


@pytest.mark.parametrize("stride,first", [(100, 37), (1000, 4095), (2 * PAGE, 1152), (216 * PAGE, 1152),
                                          (216 * PAGE, 1184)])
def test_tiny_and_large_experts_land_the_same_bytes_every_way(odirect, raw_model, stride, first):
    # tiny experts (a stride no page multiple: declined), A3B-sized ones (216 pages) at the write-up's
    # 1152 B remainder (placed) and at 1184 B (not a multiple of 64: declined); 1 MiB pieces cut them
    index = raw_blobs(raw_model, [stride, stride], first=first)
    placeable = stride % PAGE == 0 and first % 64 == 0
    digests = []
    for mode in ("bounce", "inplace"):
        result, got = load(index, mode=mode, bounce_mib=1, threads=2)
        digests.append(got)
        fact = result.engaged_by("odirect-zero-copy")
        assert fact.done == (2 if placeable and mode == "inplace" else 0), str(fact)
    assert digests[0] == digests[1]
    from workbench.io.pagecache import prepare

    for cache in ("cold", "warm"):
        prepare(index.path, cache)
        dev = open_device("host")
        experts = get_strategy("experts")(upload="pageable", chunk_mib=1, threads=2).load(index, dev)
        assert verify_placements(index, dev, experts.placements).ok
        assert experts.engaged_by("blob_zero_copy").total == 2
