"""O_DIRECT primitives: window arithmetic, aligned buffers, reads of unaligned file tails."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from workbench.io import direct
from workbench.io.direct import (
    AlignedBuffer,
    aligned_window,
    direct_io_support,
    logical_block_size,
    open_direct,
    read_direct,
)


@pytest.fixture
def odirect_dir(tmp_path):
    avail = direct_io_support(tmp_path)
    if not avail:
        pytest.skip(f"O_DIRECT not supported here: {avail.reason}")
    return tmp_path


@pytest.mark.parametrize("block", [512, 4096])
@pytest.mark.parametrize("offset, nbytes", [(0, 0), (0, 1), (1, 1), (1152, 4096 * 145), (4095, 2),
                                             (4096, 4096), (12345, 999), (10**12 + 7, 33)])
def test_aligned_window_encloses_the_range(offset, nbytes, block):
    start, length, shift = aligned_window(offset, nbytes, block)
    assert start % block == 0 and length % block == 0
    assert start <= offset and start + length >= offset + nbytes
    assert shift == offset - start and 0 <= shift < block
    # the smallest such window: dropping a block at either end would cut the payload
    assert start + block > offset
    assert length == 0 or start + length - block < offset + nbytes or nbytes == 0


def test_aligned_window_examples():
    assert aligned_window(1152, 4096, 4096) == (0, 8192, 1152)
    assert aligned_window(1152, 4096, 512) == (1024, 4608, 128)
    assert aligned_window(8192, 4096, 4096) == (8192, 4096, 0)
    with pytest.raises(ValueError):
        aligned_window(-1, 10, 512)


@pytest.mark.parametrize("alignment", [512, 4096, 65536])
def test_aligned_buffer(alignment):
    with AlignedBuffer(10_000, alignment) as buf:
        assert buf.address % alignment == 0
        assert len(buf.view) == 10_000 and not buf.view.readonly
        buf.view[:3] = b"abc"
        arr = np.frombuffer(buf.view, dtype=np.uint8)
        assert arr.ctypes.data == buf.address and bytes(arr[:3]) == b"abc"
        del arr
    buf.close()  # idempotent


def test_aligned_buffer_rejects_bad_alignment():
    with pytest.raises(ValueError):
        AlignedBuffer(100, 3000)


def test_logical_block_size_is_sane(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 8192)
    block = logical_block_size(path)
    assert block in (512, 1024, 2048, 4096)
    assert logical_block_size(tmp_path) == block  # same device


def test_logical_block_size_probe_without_sysfs(odirect_dir, monkeypatch):
    path = odirect_dir / "f.bin"
    path.write_bytes(b"x" * 8192)
    real = direct._sysfs_block_size(path)
    monkeypatch.setattr(direct, "_sysfs_block_size", lambda p: None)
    probed = logical_block_size(path)
    assert probed in (512, 4096)
    if real is not None:
        assert probed == (512 if real == 512 else 4096)


@pytest.mark.parametrize("size", [4096 * 3, 4096 * 3 + 1, 4096 * 3 + 777, 100])
def test_read_direct_file_tail(odirect_dir, size):
    data = np.random.default_rng(size).bytes(size)
    path = odirect_dir / "tail.bin"
    path.write_bytes(data)
    block = max(logical_block_size(path), 4096)
    start, length, shift = aligned_window(4096 if size > 4096 else 0, size, block)
    fd = open_direct(path)
    try:
        with AlignedBuffer(length + block, block) as buf:
            got = read_direct(fd, buf.view, start, length + block)  # ask past EOF on purpose
            assert got == size - start
            assert bytes(buf.view[:got]) == data[start:]
    finally:
        os.close(fd)


def test_read_direct_loops_over_short_reads(odirect_dir, monkeypatch):
    data = np.random.default_rng(3).bytes(4096 * 8)
    path = odirect_dir / "short.bin"
    path.write_bytes(data)
    real_preadv = os.preadv

    def short_preadv(fd, bufs, offset):  # the kernel may return fewer bytes than asked
        view = bufs[0]
        return real_preadv(fd, [view[: min(len(view), 4096)]], offset)

    monkeypatch.setattr(os, "preadv", short_preadv)
    fd = open_direct(path)
    try:
        with AlignedBuffer(4096 * 8) as buf:
            assert read_direct(fd, buf.view, 0, 4096 * 8) == 4096 * 8
            assert bytes(buf.view) == data
    finally:
        os.close(fd)


def test_unaligned_direct_read_is_refused(odirect_dir):
    path = odirect_dir / "f.bin"
    path.write_bytes(b"y" * 8192)
    fd = open_direct(path)
    try:
        with AlignedBuffer(8192) as buf:
            sub = buf.view[1:4097]
            with pytest.raises(OSError) as err:
                os.preadv(fd, [sub], 0)
            sub.release()
        assert err.value.errno == errno.EINVAL
    finally:
        os.close(fd)


def test_direct_io_support_reports_reasons(tmp_path):
    assert direct_io_support(tmp_path / "missing").reason.startswith("no such")
    f = tmp_path / "f.bin"
    f.write_bytes(b"z" * 4096)
    assert direct_io_support(f).ok == direct_io_support(tmp_path).ok
    assert not list(tmp_path.glob(".wb-odirect-*"))  # the probe file is cleaned up


def test_direct_io_support_failure_names_errno_and_fs(tmp_path, monkeypatch):
    def refuse(path):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(direct, "open_direct", refuse)
    avail = direct_io_support(tmp_path)
    assert not avail and avail.reason.startswith("EINVAL on ")
