"""O_DIRECT primitives: open, probe support, find the alignment unit, aligned buffers and windows.

O_DIRECT bypasses the page cache, and in exchange the file offset, the transfer length and the buffer
address must all be multiples of the device's logical block size. A tensor rarely starts on one (GGUF
aligns data to 32 bytes), so a reader pulls the enclosing block-aligned window and skips ``shift`` bytes.
"""
from __future__ import annotations

import ctypes
import errno
import mmap
import os

from workbench.formats.opening import open_regular
from workbench.output.owned import make_owned
from workbench.registry import Availability

DEFAULT_ALIGNMENT = 4096


def open_direct(path: str | os.PathLike) -> int:
    """``os.open(path, O_RDONLY | O_DIRECT)`` of a regular file (a FIFO or device in its place is a
    FormatError, never waited on); an OSError (EINVAL where unsupported) is raised as is."""
    return open_regular(path, os.O_RDONLY | os.O_DIRECT)


class AlignedBuffer:
    """Anonymous, page-aligned memory for O_DIRECT reads; ``view`` is a writable memoryview of ``nbytes``."""

    def __init__(self, nbytes: int, alignment: int = DEFAULT_ALIGNMENT):
        if nbytes < 0 or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"AlignedBuffer({nbytes}, {alignment}): need nbytes >= 0, power-of-two alignment")
        self.nbytes, self.alignment = nbytes, alignment
        extra = max(0, alignment - mmap.PAGESIZE)  # anonymous maps are page aligned already
        self._map = mmap.mmap(-1, max(1, nbytes + extra), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))  # temporary export, dropped here
        skip = -base % alignment
        self.address = base + skip
        self.view = memoryview(self._map)[skip : skip + nbytes]

    def close(self) -> None:
        """Unmap; raises BufferError while slices of ``view`` are still alive."""
        if self._map.closed:
            return
        self.view.release()
        self._map.close()

    def __enter__(self) -> "AlignedBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def aligned_window(offset: int, nbytes: int, block: int) -> tuple[int, int, int]:
    """The block-aligned window enclosing ``[offset, offset + nbytes)``: (start, length, shift).

    ``shift = offset - start`` is where the payload begins inside the window.
    """
    if offset < 0 or nbytes < 0 or block <= 0:
        raise ValueError(f"aligned_window({offset}, {nbytes}, {block})")
    start = offset - offset % block
    end = -(-(offset + nbytes) // block) * block
    return start, end - start, offset - start


def read_direct(fd: int, view: memoryview, start: int, length: int) -> int:
    """Read ``length`` bytes at ``start`` into ``view[:length]``, looping over short reads.

    Returns the bytes read: less than ``length`` only at end of file, which may fall inside the last
    block (O_DIRECT then returns the file's tail and stops).
    """
    if length > len(view):
        raise ValueError(f"read of {length} B into a {len(view)} B buffer")
    done = 0
    while done < length:
        n = os.preadv(fd, [view[done:length]], start + done)
        if n == 0:
            break
        done += n
        if done < length and start + done >= os.fstat(fd).st_size:
            break  # the tail: the next offset would be unaligned and there is nothing there anyway
    return done


def _sysfs_block_size(path: str | os.PathLike) -> int | None:
    dev = os.stat(path).st_dev
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    # A partition has no queue/ of its own; its parent disk's applies.
    for candidate in (f"{base}/queue/logical_block_size", f"{base}/../queue/logical_block_size"):
        try:
            with open(candidate, encoding="ascii") as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            continue
    return None


def _probe_block_size(path: str | os.PathLike) -> int:
    """512 when a 512-byte O_DIRECT read at a 512-aligned address works, else 4096."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return DEFAULT_ALIGNMENT
    try:
        fd = open_direct(path)
    except OSError:
        return DEFAULT_ALIGNMENT
    try:
        with AlignedBuffer(1024) as buf:
            sub = buf.view[512:1024]  # address 512 past a page: only 512-aligned
            try:
                os.preadv(fd, [sub], 0)
                return 512
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                return DEFAULT_ALIGNMENT
            finally:
                sub.release()
    finally:
        os.close(fd)


def logical_block_size(path: str | os.PathLike) -> int:
    """The O_DIRECT alignment unit for ``path``: the block device's logical block size, else probed."""
    return _sysfs_block_size(path) or _probe_block_size(path)


def _try_direct_read(path: str | os.PathLike) -> Availability:
    try:
        fd = open_direct(path)
    except OSError as exc:
        return Availability(False, refusal_reason(exc, path))
    try:
        return direct_read_works(fd, path)
    finally:
        os.close(fd)


def direct_read_works(fd: int, path: str | os.PathLike = "") -> Availability:
    """Whether one aligned read through ``fd`` (opened O_DIRECT) works: some file systems accept the
    open and refuse the reads."""
    try:
        with AlignedBuffer(DEFAULT_ALIGNMENT) as buf:
            os.preadv(fd, [buf.view], 0)
        return Availability(True)
    except OSError as exc:
        return Availability(False, refusal_reason(exc, path))


def refusal_reason(exc: OSError, path: str | os.PathLike) -> str:
    """``EINVAL on tmpfs (Invalid argument)``: why O_DIRECT was refused, and where."""
    from workbench.io.pagecache import filesystem_type

    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"{name} on {filesystem_type(path)} ({exc.strerror})"


def direct_io_support(path_or_dir: str | os.PathLike) -> Availability:
    """Whether an O_DIRECT read works for this file, or for files in this directory (tried, not guessed)."""
    if os.path.isfile(path_or_dir):
        return _try_direct_read(path_or_dir)
    if not os.path.isdir(path_or_dir):
        return Availability(False, f"no such file or directory: {path_or_dir}")
    try:
        fd, tmp = make_owned(path_or_dir, ".wb-odirect-")  # a probe killed here is reaped by the next one
    except OSError as exc:
        return Availability(False, f"untested: cannot create a file in {path_or_dir} ({exc.strerror})")
    try:
        os.write(fd, os.urandom(DEFAULT_ALIGNMENT))
        os.fsync(fd)
        return _try_direct_read(tmp)
    finally:
        os.close(fd)
        os.unlink(tmp)
