"""``odirect`` over a model of several files: one O_DIRECT descriptor per file, each file's own block
size for its aligned windows, the in-place mode's blobs placed in every file, and a file where O_DIRECT
is refused read buffered — that file only, said in ``odirect: n/N`` and in the zero-copy fact."""
from __future__ import annotations

import os
from collections import Counter

import pytest

import workbench.io.direct as direct
from workbench.io.direct import direct_io_support
from workbench.measure.run.verify import verify_placements
from workbench.registry import Availability
from workbench.strategies import get_strategy
from workbench.upload.host import HostDevice


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


@pytest.fixture(scope="module")
def odirect(tmp_path_factory) -> None:
    if not direct_io_support(tmp_path_factory.mktemp("od")):
        pytest.skip("O_DIRECT is refused where the test files lie")


def load(index, **params):
    dev = HostDevice()
    result = get_strategy("odirect")(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok and report.checked == report.total == len(index), (report.first_mismatch, report.detail)
    return result


@pytest.mark.parametrize("mode", ["bounce", "inplace"])
@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_a_set_one_o_direct_descriptor_per_file(odirect, sharded_model, monkeypatch, fmt, mode):
    index = sharded_model(fmt, "moe", shards=3, size=2 << 20, alignment=64)
    paths, peak = {f.path for f in index.files}, Counter()
    real = HostDevice.copy_h2d

    def sampling(self, dst, dst_offset, src, *, asynchronous=False):
        held = Counter()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
                with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as fh:
                    flags = int(fh.read().split("flags:")[1].split()[0], 8)
            except (OSError, IndexError):
                continue
            if target in paths:
                held[target, bool(flags & os.O_DIRECT)] += 1
        for key, n in held.items():
            peak[key] = max(peak[key], n)
        return real(self, dst, dst_offset, src, asynchronous=asynchronous)

    monkeypatch.setattr(HostDevice, "copy_h2d", sampling)
    result = load(index, mode=mode, threads=3, bounce_mib=1)
    assert peak == {(p, True): 1 for p in paths}  # one O_DIRECT descriptor per file, and nothing else
    assert result.engaged_by("odirect").state == "ON" and "over 3 files" in result.engaged_by("odirect").note
    if mode == "inplace" and all(b.offset % 64 == 0 for b in index.blobs):
        fact = result.engaged_by("odirect-zero-copy")
        assert fact.done == fact.total == len(index.blobs) and len({b.file for b in index.blobs}) > 1
        assert result.counters["expert_shift_copy_bytes"] == 0


@pytest.mark.parametrize("mode", ["bounce", "inplace"])
def test_a_file_that_refuses_o_direct_is_read_buffered_alone(odirect, sharded_model, monkeypatch, mode):
    index = sharded_model("gguf", "moe", shards=3, size=2 << 20, alignment=64)
    refused = index.files[1]
    real = direct.direct_read_works
    monkeypatch.setattr(direct, "direct_read_works", lambda fd, path: Availability(False, "EINVAL on tmpfs")
                        if path == refused.path else real(fd, path))
    result = load(index, mode=mode, threads=2, bounce_mib=1)
    fact = result.engaged_by("odirect")
    assert (fact.done, fact.total, fact.state) == (len(index) - refused.n_tensors, len(index), "PARTIAL")
    assert f"EINVAL on tmpfs for 1/3 files: {refused.name}" in fact.note
    assert any(n.startswith("O_DIRECT refused (EINVAL on tmpfs for 1/3 files") for n in result.notes)
    zero = result.engaged_by("odirect-zero-copy")
    in_refused = sum(1 for b in index.blobs if b.file == refused.path)
    if mode == "inplace" and in_refused:
        assert zero.done == len(index.blobs) - in_refused and zero.note.startswith("O_DIRECT refused")
    assert result.path["direct"] is True


def test_every_file_refusing_is_inert_in_both_facts(sharded_model, monkeypatch):
    index = sharded_model("safetensors", "moe", shards=3, size=2 << 20)

    def refuse(path):
        raise OSError(22, "Invalid argument", str(path))

    monkeypatch.setattr(direct, "open_direct", refuse)
    result = load(index, mode="inplace")
    fact = result.engaged_by("odirect")
    assert fact.state == "INERT" and fact.note.endswith("for 3/3 files: " + ", ".join(f.name for f in index.files))
    assert result.engaged_by("odirect-zero-copy").state == "INERT"
    assert result.path["direct"] is False


def test_each_file_is_read_at_its_own_block_size(odirect, sharded_model, monkeypatch):
    index = sharded_model("gguf", "dense", shards=3, size=2 << 20)
    blocks = {f.path: b for f, b in zip(index.files, (512, 4096, 512))}
    monkeypatch.setattr(direct, "logical_block_size", lambda path: blocks[os.fspath(path)])
    windows = []
    real = direct.read_direct
    monkeypatch.setattr(direct, "read_direct", lambda fd, view, start, length: (
        windows.append((os.readlink(f"/proc/self/fd/{fd}"), start, length)), real(fd, view, start, length))[1])
    result = load(index, threads=1, bounce_mib=1)
    assert "block 512/4096 B" in result.engaged_by("odirect").note
    for path, start, length in windows:
        assert start % blocks[path] == 0 and length % blocks[path] == 0 or start + length >= os.path.getsize(path)
    assert {path for path, _, _ in windows} == set(blocks)
    assert any(start % 4096 for path, start, _ in windows if blocks[path] == 512)  # the finer block was used
