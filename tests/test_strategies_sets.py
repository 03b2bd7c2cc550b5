"""Every registered strategy over a model of several files with layouts no writer makes: files with their
own data offsets, tensors at odd offsets, two tensors at the same offset and size in two files (reading
the wrong file lands the wrong bytes there), a zero-size tensor. Each tensor is verified against its own
file, and the load holds one descriptor per file (ring: one per reader per file, its own readahead) and
maps each file at most once (Python's mmap keeps a duplicate of the descriptor for its mapping).
(Byte-exactness over gguf-split and safetensors shards is the shared suite's.)"""
from __future__ import annotations

import os
from collections import Counter

import pytest

from test_strategies_suite import load_and_verify, set_cache_all
from workbench.strategies import STRATEGIES, get_strategy, ring_readers, toolkit
from workbench.upload.direct_read import DirectReader
from workbench.upload.host import HostDevice

SPECS = [
    {"sizes": [3, 1, 4097, (1 << 20) + 333, 0, 77], "first": 1231, "gap": 29, "tail": 17},
    {"sizes": [5, 12289, 65537, 4096, 1], "first": 77, "gap": 3, "tail": 4096},
    {"sizes": [12289, 70001, 3], "first": 85, "gap": 3, "tail": 1},  # its first tensor sits where file 1's second does
]


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def held_per_file(paths: set[str]) -> Counter:
    """How many of this process's descriptors point at each model file right now."""
    held: Counter = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used, closed since
            continue
        if target in paths:
            held[target] += 1
    return held


def variants():
    """Each registered strategy in small pieces, and each of its declared variants."""
    for name in STRATEGIES.names():
        params = get_strategy(name).Params
        for variant in ({}, *map(dict, params.variants)):
            chosen = {**params.small_pieces, **variant}
            yield pytest.param(name, chosen, id=f"{name}[{','.join(f'{k}={v}' for k, v in variant.items())}]")


@pytest.mark.parametrize("name, params", list(variants()))
def test_a_set_with_odd_layouts_one_descriptor_per_file_each_tensor_from_its_own_file(name, params, raw_set,
                                                                                       monkeypatch):
    index = raw_set(SPECS)
    one, two = index.tensor("1.t001"), index.tensor("2.t000")
    assert (one.offset, one.nbytes) == (two.offset, two.nbytes) and one.file != two.file
    assert len({f.data_offset for f in index.files}) == 3
    paths = {f.path for f in index.files}
    peak: Counter = Counter()
    real = HostDevice.copy_h2d

    def sample():
        for path, n in held_per_file(paths).items():
            peak[path] = max(peak[path], n)

    def sampling(self, dst, dst_offset, src, *, asynchronous=False):
        sample()
        return real(self, dst, dst_offset, src, asynchronous=asynchronous)

    real_direct = DirectReader.read_window

    def sampling_direct(self, fd, w, stop=None):  # read straight into host memory: no copy to sample at
        sample()
        return real_direct(self, fd, w, stop)

    real_pread = ring_readers.pread_into

    def sampling_pread(fd, view, offset, path=""):  # ring copier=one: its copies run after the readers left
        sample()
        return real_pread(fd, view, offset, path)

    mapped: Counter = Counter()
    real_map = toolkit.FileMapping.__init__

    def counting(self, fd, path=""):
        mapped[path] += 1
        real_map(self, fd, path)

    monkeypatch.setattr(HostDevice, "copy_h2d", sampling)
    monkeypatch.setattr(DirectReader, "read_window", sampling_direct)
    monkeypatch.setattr(ring_readers, "pread_into", sampling_pread)
    monkeypatch.setattr(toolkit.FileMapping, "__init__", counting)
    set_cache_all(index, "cold")
    result = load_and_verify(name, index, "host", **params)
    assert set(peak) == {t.file for t in index if t.nbytes}, f"{name} held no descriptor of some file"
    assert all(n == 1 for n in mapped.values()), f"{name}: mappings per file {dict(mapped)}"
    for path, n in peak.items():
        staged = name == "ring" or (name == "experts" and params.get("upload", "staged") == "staged")
        allowed = result.path["readers"] if staged else 1  # ring, experts staged: each reader its own descriptor
        assert n <= allowed + mapped[path], f"{name}: {n} descriptors of {os.path.basename(path)} held at once"
