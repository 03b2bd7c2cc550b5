"""What ``/proc`` says about an engine's processes and the model's files.

- the tree: ``root`` and its live descendants (``/proc/PID/task/TID/children``, else by session);
- a process's I/O counters (``/proc/PID/io``: ``rchar``, the bytes its read calls returned from *any*
  file, and ``read_bytes``, what it made the kernel fetch from storage);
- its descriptors open on the model's files: every ``/proc/PID/fd/N`` stat'ed and matched on
  (st_dev, st_ino), and its offset (``pos:`` in ``/proc/PID/fdinfo/N``);
- the resident pages of its mappings of the model's files: ``/proc/PID/maps`` lines whose dev:inode
  (or, on an overlay, path) is one of them, their pages counted present in ``/proc/PID/pagemap`` —
  the mapping's Rss, read for those mappings only, so a process with thousands of others costs little.
"""
from __future__ import annotations

import functools
import os
import re

import numpy as np

from workbench.measure.engine.target import ReadTarget

_PAGEMAP_CHUNK = 1 << 20  # pages read from pagemap at once (8 MiB of entries)


def tree_of(root: int) -> list[int]:
    """``root`` and every live descendant (through /proc/PID/task/TID/children; else by session)."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return _session_members(root)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                continue
    return out


def _session_members(sid: int) -> list[int]:
    """Every process of session ``sid`` (the engine leads its own session): the slower fallback."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            members.append(int(name))
    return members


def io_counters(pid: int) -> tuple[int, int] | None:
    """(rchar, read_bytes) of a process (its reaped children included); None when it is gone. Raises
    PermissionError when it may not be read (another user's, a setuid program)."""
    try:
        with open(f"/proc/{pid}/io") as fh:
            values = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
        return int(values["rchar"]), int(values["read_bytes"])
    except (FileNotFoundError, ProcessLookupError):
        return None
    except (KeyError, ValueError):
        raise PermissionError(f"/proc/{pid}/io unreadable") from None


def model_fds(pid: int, model: ReadTarget, known: dict[tuple[int, str, str], int | None]) -> list[tuple[int, int, int]]:
    """(fd, file, offset) of each of ``pid``'s descriptors open on one of the model's files.

    ``known`` remembers which file a (pid, fd, link) is, so a descriptor is stat'ed once, not per sample."""
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in names:
        try:
            link = os.readlink(f"{base}/{name}")
        except OSError:
            continue
        if not link.startswith("/"):  # a pipe, a socket, an anonymous inode
            continue
        key = (pid, name, link)
        if key not in known:
            try:
                st = os.stat(f"{base}/{name}")
            except OSError:
                continue
            known[key] = model.file_of((st.st_dev, st.st_ino))
        index = known[key]
        if index is None:
            continue
        pos = _fd_pos(pid, name)
        if pos is not None:
            out.append((int(name), index, pos))
    return out


def _fd_pos(pid: int, fd: str) -> int | None:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
            for line in fh:
                if line.startswith("pos:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def model_mappings(pid: int, model: ReadTarget) -> dict[int, int]:
    """Resident bytes of ``pid``'s mappings of each of the model's files it maps ({} when it maps none;
    a file mapped with nothing resident yet is there with 0)."""
    try:
        with open(f"/proc/{pid}/maps") as fh:
            maps = fh.read()
    except OSError:
        return {}
    spans: list[tuple[int, int, int]] = []
    for m in _mapping_lines(model).finditer(maps):  # one scan in C: only the model's lines match
        dev = os.makedev(int(m.group(3), 16), int(m.group(4), 16))
        inode, path = (m.group(5), m.group(6)) if m.group(5) else (m.group(7), m.group(8))
        index = model.file_of((dev, int(inode)), path.strip())
        if index is not None:
            spans.append((index, int(m.group(1), 16), int(m.group(2), 16)))
    out = {index: 0 for index, _, _ in spans}
    if not spans:
        return out
    try:
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return out
    try:
        for index, start, end in spans:
            out[index] += _present_pages(fd, start, end) * os.sysconf("SC_PAGE_SIZE")
    finally:
        os.close(fd)
    return out


@functools.lru_cache(maxsize=8)
def _mapping_lines(model: ReadTarget) -> re.Pattern[str]:
    """A ``/proc/PID/maps`` line whose inode is one of the model's, or whose path is (an overlay's)."""
    inodes = "|".join(sorted({str(key[1]) for key in model.keys if key is not None})) or "(?!)"
    paths = "|".join(re.escape(p) for p in model.paths) or "(?!)"
    return re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) "
                      rf"(?:({inodes}) +(.*)|(\d+) +((?:{paths})(?: \(deleted\))?))$", re.M)


def _present_pages(fd: int, start: int, end: int) -> int:
    """Pages of [start, end) present in the process's page table (pagemap bit 63)."""
    page = os.sysconf("SC_PAGE_SIZE")
    first, count, present = start // page, (end - start) // page, 0
    while count > 0:
        n = min(count, _PAGEMAP_CHUNK)
        try:
            data = os.pread(fd, 8 * n, 8 * first)
        except OSError:
            return present
        entries = np.frombuffer(data[:len(data) - len(data) % 8], dtype="<u8")
        present += int(np.count_nonzero(entries >> np.uint64(63)))
        if len(entries) < n:
            return present
        first, count = first + n, count - n
    return present


__all__ = ["io_counters", "model_fds", "model_mappings", "tree_of"]
