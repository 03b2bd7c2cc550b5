"""Page-cache control on this machine's real file system (a disk-backed tmp_path)."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from workbench.errors import CacheStateError, FormatError
from workbench.io import pagecache
from workbench.io.pagecache import (
    evict_file_pages,
    filesystem_type,
    page_size,
    prepare,
    resident_fraction,
    resident_map,
    resident_pages,
    warm_file,
)
from workbench.io.restore import restore_residency

PS = page_size()


@pytest.fixture
def data_file(tmp_path):
    if filesystem_type(tmp_path) in pagecache.MEMORY_FILESYSTEMS:
        pytest.skip(f"tmp_path is on {filesystem_type(tmp_path)}; page-cache tests need a disk")
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng(1).bytes(256 * PS + 123))  # odd tail: last page partial
    # Freshly written data may sit in large folios that a page-range DONTNEED cannot split; start
    # every test from pages that came in by reading.
    evict_file_pages(path)
    return path


def test_warm_then_resident_then_evict(data_file):
    warm_file(data_file)
    assert resident_fraction(data_file) > 0.98
    evict_file_pages(data_file)
    assert resident_fraction(data_file) < 0.02
    warm_file(data_file, threads=3)
    resident, total = resident_pages(data_file)
    assert total == 257 and resident == total


def test_partial_range_residency(data_file):
    evict_file_pages(data_file)
    warm_file(data_file, 10 * PS, 20 * PS)
    rmap = resident_map(data_file)
    assert rmap[10:30].all()
    assert not rmap[:10].any() and not rmap[40:].any()  # readahead may take a few past 30, not far
    assert resident_pages(data_file, 10 * PS, 20 * PS) == (20, 20)
    # an unaligned range counts every page it touches
    assert resident_pages(data_file, 10 * PS + 1, PS) == (2, 2)


def test_evict_range_leaves_the_rest(data_file):
    warm_file(data_file)
    evict_file_pages(data_file, 64 * PS, 64 * PS)
    rmap = resident_map(data_file)
    assert not rmap[64:128].any()
    assert rmap[:64].all() and rmap[128:].all()


def test_windowed_mincore_matches_single_window(data_file, monkeypatch):
    evict_file_pages(data_file)
    warm_file(data_file, 3 * PS, 50 * PS)
    warm_file(data_file, 200 * PS, 7 * PS)
    whole = resident_map(data_file)
    calls = []
    real = pagecache._mincore_window

    def spy(fd, path, start, nbytes, out):
        calls.append((start, nbytes))
        assert nbytes <= 16 * PS
        real(fd, path, start, nbytes, out)

    monkeypatch.setattr(pagecache, "MINCORE_WINDOW", 16 * PS)
    monkeypatch.setattr(pagecache, "_mincore_window", spy)
    windowed = resident_map(data_file)
    assert len(calls) == 17  # 257 pages / 16 per window
    assert np.array_equal(whole, windowed)
    part = resident_map(data_file, 5 * PS + 7, 40 * PS)
    assert np.array_equal(part, whole[5:46])


def test_empty_file(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    assert resident_pages(path) == (0, 0)
    assert resident_fraction(path) == 1.0
    assert prepare(path, "cold") == 0.0
    assert prepare(path, "warm") == 1.0
    evict_file_pages(path)
    warm_file(path)


def test_prepare_cold_and_warm_verified(data_file):
    assert prepare(data_file, "warm") > 0.98
    assert resident_fraction(data_file) > 0.98
    assert prepare(data_file, "cold") < 0.02
    assert resident_fraction(data_file) < 0.02
    warm_file(data_file, 0, 10 * PS)
    got = prepare(data_file, "asis")
    assert got == pytest.approx(resident_fraction(data_file)) and 0 < got < 0.5


def test_prepare_cold_fails_when_pages_are_pinned(data_file):
    import mmap

    with open(data_file, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
        m.madvise(mmap.MADV_WILLNEED)
        bytes(m)  # fault every page into this process: mapped pages cannot be dropped
        with pytest.raises(CacheStateError) as err:
            prepare(data_file, "cold")
    assert err.value.wanted == "cold" and err.value.resident > 0.5
    assert str(data_file) in str(err.value)


def test_prepare_cold_waits_out_a_mapping_whose_process_is_exiting(data_file, monkeypatch):
    """An engine killed just before a cold run may still map the model for a moment: eviction is retried
    for up to COLD_SETTLE_S before the state is called unreachable (it failed at once, two passes)."""
    import subprocess
    import sys

    # the holder maps for 0.3 s more and exits: within the product's 1 s unless a loaded box delays its
    # exit; 10 s here, so only a prepare that does not retry (it fails while the mapping is there) fails
    monkeypatch.setattr(pagecache, "COLD_SETTLE_S", 10.0)

    holder = ("import mmap, sys, time\nfh = open(sys.argv[1], 'rb')\nm = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)\n"
              "bytes(m)\nprint('mapped', flush=True)\ntime.sleep(0.3)\n")
    proc = subprocess.Popen([sys.executable, "-c", holder, str(data_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mapped"
        assert resident_fraction(data_file) > 0.98
        assert prepare(data_file, "cold") < 0.02
    finally:
        proc.kill()
        proc.wait()


def test_prepare_cold_on_tmpfs_says_tmpfs():
    shm = "/dev/shm"
    if not os.path.isdir(shm) or filesystem_type(shm) != "tmpfs":
        pytest.skip("/dev/shm is not tmpfs here")
    path = os.path.join(shm, f"wb-test-{os.getpid()}.bin")
    with open(path, "wb") as fh:
        fh.write(b"x" * 3 * PS)
    try:
        with pytest.raises(CacheStateError, match="tmpfs") as err:
            prepare(path, "cold")
        assert err.value.resident == 1.0
        assert prepare(path, "warm") == 1.0
    finally:
        os.unlink(path)


def test_prepare_warm_reports_memory_when_unreachable(data_file, monkeypatch):
    monkeypatch.setattr(pagecache, "warm_file", lambda *a, **k: None)  # as if memory were too small
    evict_file_pages(data_file)
    with pytest.raises(CacheStateError, match="free memory") as err:
        prepare(data_file, "warm")
    assert err.value.resident < 0.02


def test_prepare_rejects_unknown_state(data_file):
    with pytest.raises(CacheStateError, match="unknown cache state"):
        prepare(data_file, "lukewarm")


def test_bad_paths(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        resident_fraction(tmp_path / "missing")
    with pytest.raises(FormatError, match="directory"):
        evict_file_pages(tmp_path)


def test_mincore_blind_for_foreign_files_is_an_error(data_file, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(CacheStateError, match="mincore hides"):
        resident_fraction(data_file)
    with pytest.raises(CacheStateError, match="mincore hides") as err:
        prepare(data_file, "cold")
    assert err.value.wanted == "cold"


def test_restore_residency(data_file):
    evict_file_pages(data_file)
    warm_file(data_file, 0, 32 * PS)
    before = resident_map(data_file, 16 * PS, 64 * PS)
    warm_file(data_file)
    evict_file_pages(data_file, 0, 20 * PS)
    restore_residency(data_file, 16 * PS, before)
    assert np.array_equal(resident_map(data_file, 16 * PS, 64 * PS), before)


def test_mount_of_picks_the_longest_mount_point(tmp_path):
    fs, mount_point, _ = pagecache.mount_of(tmp_path)
    assert str(tmp_path).startswith(mount_point)
    assert fs != "unknown"


def test_a_fifo_is_refused_at_once_not_opened(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FormatError, match="not a regular file"):
        resident_fraction(fifo)  # opening it would block until a writer appears


def test_cold_on_a_file_system_without_fsync(tmp_path, monkeypatch):
    # squashfs, iso9660: fdatasync fails with EINVAL, and there is nothing dirty to write back
    path = tmp_path / "m.bin"
    path.write_bytes(os.urandom(1 << 20))
    os.sync()
    warm_file(path)

    def no_fsync(fd):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fdatasync", no_fsync)
    assert prepare(path, "cold") <= 0.02


def test_sampled_residency_estimates_the_full_probe(data_file):
    from workbench.io.pagecache import sampled_resident_fraction

    evict_file_pages(data_file)
    assert sampled_resident_fraction(data_file, samples=8, pages=4) == 0.0
    warm_file(data_file)
    assert sampled_resident_fraction(data_file, samples=8, pages=4) == 1.0
    evict_file_pages(data_file, 0, 128 * PS)  # the first half out, the second in
    exact = resident_fraction(data_file)
    assert 0.4 < exact < 0.6
    assert sampled_resident_fraction(data_file, samples=16, pages=2) == pytest.approx(exact, abs=0.07)
    assert sampled_resident_fraction(data_file, 128 * PS, samples=4, pages=2) == 1.0  # a range: only it
    # no bigger than the sample: every page, the same answer as the full probe
    assert sampled_resident_fraction(data_file, samples=64, pages=8) == exact
