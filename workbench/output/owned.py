"""Files the workbench makes outside its data root (scratch beside a model, I/O probe files in a model's
directory, a peer library's log in the temporary directory), named after the process that made them so
that the next process making the same kind of file removes what a killed one left.

A name is ``<prefix><pid>-<start ticks>-<host tag>-<boot tag>-<hex><suffix>``: the pid and its start
time in clock ticks since boot (a reused pid is not the same process), and 8 hex digits of a hash of
the host and pid namespace and of the kernel's boot id. A file is its owner's while that owner lives;
it is judged as the ledger judges an abandoned attempt (:mod:`workbench.ledger.owner`): a file of
another host or pid namespace (a directory shared over the network, a container) is never touched; a
file of another boot of this host is gone (every process of that boot is); else it is gone when no
process with that pid and start time exists. The older name without the tags
(``<prefix><pid>-<ticks>-<hex>``) is judged as this host's and boot's.

Reaping touches only names that match the pattern exactly, only regular files (``lstat``: a link is
never followed or removed), through a descriptor of the directory. This module imports no layer of the
workbench (the ledger, the measuring code and ``io`` all use it).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Callable

_HEX = re.compile(r"[0-9a-f]{6}")


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pid_ns(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot); None if no such process.

    A zombie still has its entry: it has stopped running, so it counts as gone once its parent reaps
    it, which for a dead runner is at once (its parent is init or a shell)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    try:
        if fields[0] == "Z":
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _tag(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _tags() -> tuple[str, str]:
    """(host tag, boot tag) of this process; the host is ``$WORKBENCH_HOST`` or this machine's name."""
    from workbench.settings.defaults import host_id

    return _tag(f"{host_id()}\0{pid_ns('self')}"), _tag(boot_id())


def owned_name(prefix: str, suffix: str = "") -> str:
    """``<prefix><pid>-<start ticks>-<host tag>-<boot tag>-<hex><suffix>`` for this process."""
    pid = os.getpid()
    host, boot = _tags()
    return f"{prefix}{pid}-{start_ticks(pid) or 0}-{host}-{boot}-{os.urandom(3).hex()}{suffix}"


def _pattern(prefix: str, suffix: str) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(prefix)}(\d+)-(\d+)-(?:([0-9a-f]{{8}})-([0-9a-f]{{8}})-)?"
                      rf"{_HEX.pattern}{re.escape(suffix)}")


def owner_gone(name: str, prefix: str, suffix: str = "") -> bool:
    """Whether ``name`` is exactly our pattern and its owner is gone (see the module doc)."""
    match = _pattern(prefix, suffix).fullmatch(name)
    if not match:
        return False
    if match[3] is not None:
        host, boot = _tags()
        if match[3] != host:
            return False  # another host or pid namespace: never judged from here
        if match[4] != boot:
            return True  # this host rebooted since
    ticks = start_ticks(int(match[1]))
    return ticks is None or ticks != int(match[2])


def reap_owned(directory: str | os.PathLike[str], prefix: str, suffix: str = "",
               before: Callable[[str], None] = lambda _p: None) -> tuple[str, ...]:
    """Delete every regular file ``<prefix>…<suffix>`` in ``directory`` whose owner is gone
    (``before(path)`` first); returns their paths."""
    directory = os.fspath(directory)
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return ()
    gone = []
    try:
        for name in sorted(os.listdir(dfd)):
            if not (name.startswith(prefix) and owner_gone(name, prefix, suffix)):
                continue
            try:
                if not stat.S_ISREG(os.lstat(name, dir_fd=dfd).st_mode):
                    continue  # a link, a directory, a fifo planted under our name: not ours
                path = os.path.join(directory, name)
                before(path)
                os.unlink(name, dir_fd=dfd)
                gone.append(path)
            except OSError:
                pass
    finally:
        os.close(dfd)
    return tuple(gone)


def make_owned(directory: str | os.PathLike[str], prefix: str, suffix: str = "") -> tuple[int, str]:
    """(descriptor open for reading and writing, path) of a new owner-named file in ``directory``
    (``O_EXCL``, ``O_NOFOLLOW``, mode 0600), after reaping the files of this kind whose owner is gone."""
    reap_owned(directory, prefix, suffix)
    path = os.path.join(os.fspath(directory), owned_name(prefix, suffix))
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), path
