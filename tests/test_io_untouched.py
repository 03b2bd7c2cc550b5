"""Untouched reads: right bytes, and the file's page-cache residency exactly as it was found."""
from __future__ import annotations

import errno
import time

import numpy as np
import pytest
import xxhash

from workbench.errors import FormatError
from workbench.io import untouched
from workbench.io.direct import direct_io_support
from workbench.io.pagecache import (
    MEMORY_FILESYSTEMS,
    evict_file_pages,
    filesystem_type,
    page_size,
    resident_map,
    warm_file,
)
from workbench.io.untouched import iter_untouched, range_checksums

PS = page_size()
SIZE = 300 * PS + 1234  # odd tail


@pytest.fixture
def model(tmp_path):
    if filesystem_type(tmp_path) in MEMORY_FILESYSTEMS:
        pytest.skip("needs a disk-backed tmp_path")
    path = tmp_path / "model.bin"
    data = np.random.default_rng(7).bytes(SIZE)
    path.write_bytes(data)
    evict_file_pages(path)  # cold, and no large folios left over from writing
    return path, data


@pytest.fixture(params=["direct", "buffered"])
def mode(request, tmp_path):
    if request.param == "direct" and not direct_io_support(tmp_path):
        pytest.skip("O_DIRECT not supported here")
    return request.param


def _read_all(path, mode, start=0, end=None, chunk=64 << 10):
    out, pos = bytearray(), None
    for offset, data in iter_untouched(path, start, end, chunk, mode=mode):
        assert pos is None or offset == pos  # contiguous, in order
        out += data
        pos = offset + len(data)
    return bytes(out)


def test_cold_stays_cold(model, mode):
    path, data = model
    assert _read_all(path, mode) == data
    assert not resident_map(path).any()


def test_half_warm_keeps_the_same_pages(model, mode):
    path, data = model
    for off in (0, 40, 41, 150, 299):
        warm_file(path, off * PS, 7 * PS)
    warm_file(path, 300 * PS)  # the partial last page
    before = settled_map(path)
    assert 0 < before.sum() < before.size
    assert _read_all(path, mode) == data
    assert np.array_equal(resident_map(path), before)


@pytest.mark.parametrize("start, end", [(1, 2), (4095, 4097), (1152, 200 * PS + 1), (SIZE - 5, None), (0, 10**9)])
def test_subranges(model, mode, start, end):
    path, data = model
    warm_file(path, 100 * PS, 10 * PS)
    before = settled_map(path)
    assert _read_all(path, mode, start, end, chunk=3 * PS + 5) == data[start:end]
    assert np.array_equal(resident_map(path), before)


def settled_map(path, timeout=3.0):
    """resident_map once the cache stops changing: an ordinary read's own async readahead may still
    be landing, and its pages must not count as ours (CI once caught exactly that)."""
    deadline, last = time.monotonic() + timeout, resident_map(path)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = resident_map(path)
        if np.array_equal(now, last):
            return now
        last = now
    return last


def test_early_stop_still_restores(model):
    path, _ = model
    warm_file(path, 0, 3 * PS)  # ordinary read: leaves a readahead marker behind
    before = settled_map(path)
    for _offset, _data in iter_untouched(path, chunk=16 * PS, mode="buffered"):
        break
    assert np.array_equal(resident_map(path), before)


def test_views_are_released_after_use(model, mode):
    path, _ = model
    views = [data for _off, data in iter_untouched(path, chunk=64 * PS, mode=mode)]
    with pytest.raises(ValueError):
        bytes(views[0])  # reused buffer: a kept view must not silently show other bytes


def test_auto_falls_back_to_buffered(model, monkeypatch):
    path, data = model

    def refuse(p):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(untouched, "open_direct", refuse)
    assert _read_all(path, "auto") == data
    assert not resident_map(path).any()
    with pytest.raises(OSError):
        _read_all(path, "direct")


def test_range_checksums(model, mode):
    path, data = model
    ranges = [(200 * PS + 3, 5000), (0, 10), (1152, 4096 * 3), (SIZE - 1, 1), (77, 0), (1152, 100),
              (150 * PS, 40 * PS)]  # unsorted, one overlap, one empty
    warm_file(path, 0, 20 * PS)
    before = settled_map(path)
    got = range_checksums(path, ranges, mode=mode)
    assert got == [xxhash.xxh3_64(data[o:o + n]).hexdigest() for o, n in ranges]
    assert np.array_equal(resident_map(path), before)


def test_range_checksums_far_apart_ranges_skip_the_gap(model, monkeypatch):
    path, data = model
    monkeypatch.setattr(untouched, "MERGE_GAP", PS)
    spans = []
    real = untouched.iter_untouched

    def spy(p, lo, hi, *a, **k):
        spans.append((lo, hi))
        return real(p, lo, hi, *a, **k)

    monkeypatch.setattr(untouched, "iter_untouched", spy)
    ranges = [(250 * PS, 100), (10, 100)]
    assert range_checksums(path, ranges) == [xxhash.xxh3_64(data[o:o + n]).hexdigest() for o, n in ranges]
    assert spans == [(10, 110), (250 * PS, 250 * PS + 100)]


def test_bad_input(model, tmp_path):
    path, _ = model
    with pytest.raises(FormatError, match="range"):
        range_checksums(path, [(SIZE - 10, 11)])
    with pytest.raises(FormatError, match="no such file"):
        list(iter_untouched(tmp_path / "missing"))
    with pytest.raises(FormatError, match="directory"):
        list(iter_untouched(tmp_path))
    with pytest.raises(ValueError):
        list(iter_untouched(path, mode="sideways"))
    assert list(iter_untouched(path, 5, 5)) == []


def test_auto_reads_a_fully_resident_file_through_the_cache(model, monkeypatch):
    path, data = model
    warm_file(path)

    def refuse(p):
        raise AssertionError("O_DIRECT used for a fully resident file")

    monkeypatch.setattr(untouched, "open_direct", refuse)
    assert _read_all(path, "auto") == data
    assert resident_map(path).all()


def test_cachestat_counts_the_same_pages_as_mincore_once_settled(model):
    # The restore's in-flight signal: cachestat counts cached pages whether or not they are up to date,
    # mincore only up-to-date ones; once the cache is quiet the two agree, page for page.
    import os

    from workbench.io.cachestat import available, cached_pages

    if not available():
        pytest.skip("this kernel has no cachestat (Linux < 6.5)")
    path, _ = model
    fd = os.open(path, os.O_RDONLY)
    try:
        assert cached_pages(fd, 0, SIZE) == 0  # the fixture left it cold
        warm_file(path, 40 * PS, 7 * PS)
        now = settled_map(path)
        assert now.sum() >= 7 and cached_pages(fd, 0, SIZE) == int(now.sum())
        assert cached_pages(fd, 40 * PS, 7 * PS) == 7 and cached_pages(fd, 0, 40 * PS) == int(now[:40].sum())
        evict_file_pages(path)
        assert cached_pages(fd, 0, SIZE) == 0
    finally:
        os.close(fd)
