"""Memory cgroups made for a session, and the ones a killed runner left behind.

A session's cgroup is a child of the cgroup this process runs in, named
``workbench-session-<pid>-<start ticks>-<hex>`` after the runner that made it (its pid and the
process's start time in clock ticks, field 22 of ``/proc/PID/stat``: a pid alone is reused). The
runner removes it when the session ends; a runner killed with SIGKILL cannot, and the cgroup stays
with the memory still charged to it. So every runner, before it makes its own, removes each sibling
``workbench-session-*`` whose runner is gone — judged as the ledger judges an abandoned attempt
(:func:`workbench.ledger.owner.owner_state`: same host, boot and pid namespace, and no process with
that pid and start time) — and that holds no process (the kernel refuses to remove one that does).
A name without start ticks (made before they were recorded) is judged by its pid alone: gone only
when no such process exists.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

V1_ROOT, V2_ROOTS = "/sys/fs/cgroup/memory", ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
PREFIX = "workbench-session-"
_NAME = re.compile(r"workbench-session-(\d+)-(?:(\d+)-)?[0-9a-f]{6}")


@dataclass(frozen=True)
class Cgroup:
    """A made cgroup: its directory, version, what it says of itself, and the stale ones reaped first."""

    path: str
    version: int
    detail: str
    reaped: tuple[str, ...] = ()


def make_v2(limit: int) -> Cgroup:
    root = next((r for r in V2_ROOTS if os.path.exists(os.path.join(r, "cgroup.controllers"))), None)
    if root is None:
        raise OSError(0, "no unified hierarchy mounted")
    with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as fh:
        if "memory" not in fh.read().split():
            raise OSError(0, f"the unified hierarchy at {root} has no memory controller")
    path, reaped = _limited_child(root, 2, "memory.max", limit)
    swap = _read(os.path.join(path, "memory.swap.max")) or "n/a"
    return Cgroup(path, 2, f"cgroup v2 {path}: memory.max {limit / 2**20:,.0f} MiB, memory.swap.max {swap}", reaped)


def make_v1(limit: int, swap_total: int = 0) -> Cgroup:
    root = V1_ROOT
    if not os.path.exists(os.path.join(root, "memory.limit_in_bytes")):
        raise OSError(0, f"no v1 memory controller at {root}")
    path, reaped = _limited_child(root, 1, "memory.limit_in_bytes", limit)
    swap = "no swap on this machine" if swap_total == 0 else "swap allowed"
    return Cgroup(path, 1, f"cgroup v1 {path}: memory.limit_in_bytes {limit / 2**20:,.0f} MiB ({swap})", reaped)


def _limited_child(root: str, version: int, limit_file: str, limit: int) -> tuple[str, tuple[str, ...]]:
    """A new child of ``root`` with ``limit`` written to ``limit_file`` (removed again if that fails),
    and the stale children reaped first."""
    path, reaped = _child_dir(root, version)
    try:
        _write(os.path.join(path, limit_file), str(limit))
    except OSError:
        remove_cgroup(path)
        raise
    return path, reaped


def join_cgroup(path: str) -> None:
    """Move the calling process into the cgroup at ``path`` (the worker's first act)."""
    with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))


def remove_cgroup(path: str) -> bool:
    """rmdir; False when the kernel refuses (a process still in it) or it is gone already."""
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def reap_stale(parent: str) -> tuple[str, ...]:
    """Remove every ``workbench-session-*`` cgroup under ``parent`` whose runner is gone and that holds
    no process; returns their paths."""
    try:
        names = os.listdir(parent)
    except OSError:
        return ()
    return tuple(os.path.join(parent, n) for n in sorted(names)
                 if _runner_gone(n) and not _read(os.path.join(parent, n, "cgroup.procs"))
                 and remove_cgroup(os.path.join(parent, n)))


def _runner_gone(name: str) -> bool:
    match = _NAME.fullmatch(name)
    if match is None:
        return False
    from workbench.ledger.owner import GONE, Owner, current_owner, owner_state

    pid, ticks = int(match.group(1)), match.group(2)
    if ticks is None:  # an older name: the pid alone, so only a pid with no process at all is gone
        return not os.path.exists(f"/proc/{pid}")
    here = current_owner()
    return owner_state(Owner(here.host, here.boot_id, here.pid_ns, pid, int(ticks)), here) == GONE


def own_cgroup(version: int) -> str:
    """This process's cgroup in the v1 memory hierarchy (``version`` 1) or the unified one (2)."""
    with open("/proc/self/cgroup", encoding="ascii") as fh:
        for line in fh:
            ident, controllers, path = line.rstrip("\n").split(":", 2)
            if (version == 2 and ident == "0") or (version == 1 and "memory" in controllers.split(",")):
                return path
    raise OSError(0, f"not in a cgroup v{version} {'memory ' if version == 1 else ''}hierarchy")


def _child_dir(root: str, version: int) -> tuple[str, tuple[str, ...]]:
    from workbench.ledger.owner import current_owner

    parent = os.path.join(root, own_cgroup(version).lstrip("/"))
    reaped = reap_stale(parent)
    me = current_owner()
    path = os.path.join(parent, f"{PREFIX}{me.pid}-{me.start_ticks}-{os.urandom(3).hex()}")
    os.mkdir(path)
    return path, reaped


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""
