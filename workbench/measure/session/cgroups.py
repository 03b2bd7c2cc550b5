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

Where it is made (:func:`make_v2`, :func:`make_v1`): under the process's own cgroup where that works,
else under the nearest ancestor where it does, the root included. In cgroup v2 a child gets a
``memory.max`` only when its parent's ``cgroup.subtree_control`` holds ``memory``, and a cgroup that
holds processes may not enable it (the no-internal-process rule; the root is exempt): the own cgroup,
which holds this process, usually cannot. So the levels from the own cgroup up are tried in turn, each
one whose ``subtree_control`` holds ``memory`` and whose ``cgroup.procs`` this process may write (moving
the worker there needs it); where no level holds it and the root's ``cgroup.controllers`` does, ``+memory``
is written to the root's ``subtree_control`` (left on: turning it off would take the controller from
every other child there). Nothing else of the machine is changed — no process is moved to empty a
level. The H200 (2026-12-04): the own cgroup ``/process_api/<id>`` has an empty ``subtree_control``
(Permission denied on ``memory.max``), the root's holds ``memory``: the session's cgroup is made at the
root. A v1 hierarchy has no ``subtree_control``: the own cgroup, else the nearest ancestor where the
child and its limit can be made. Where it was made, and why the nearer levels were passed over, is
in :class:`Cgroup` (``made_at``, ``passed``) and its detail line.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

V1_ROOT, V2_ROOTS = "/sys/fs/cgroup/memory", ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
PREFIX = "workbench-session-"
_NAME = re.compile(r"workbench-session-(\d+)-(?:(\d+)-)?[0-9a-f]{6}")


@dataclass(frozen=True)
class Cgroup:
    """A made cgroup: its directory, version, what it says of itself, and the stale ones reaped first.

    ``made_at``: the cgroup it was made under (``/`` the root), ``own``: this process's cgroup,
    ``passed``: why each nearer level was passed over, ``enabled``: the level where ``+memory`` was
    written to ``cgroup.subtree_control`` for it ("" where none was)."""

    path: str
    version: int
    detail: str
    reaped: tuple[str, ...] = ()
    made_at: str = ""
    own: str = ""
    passed: tuple[str, ...] = ()
    enabled: str = ""

    def where(self) -> str:
        """Where it was made, in words: the own cgroup, or the ancestor and why the nearer levels were not."""
        if self.made_at == self.own:
            return f"made under this process's own cgroup {self.own}"
        what = "the root" if self.made_at == "/" else "the ancestor"
        enabled = f"; +memory written to {self.enabled}'s cgroup.subtree_control (left on)" if self.enabled else ""
        why = f" ({'; '.join(self.passed)})" if self.passed else ""
        return f"made under {what} {self.made_at}{why}{enabled}"

    def record_json(self) -> dict:
        """The ledger's record of where it was made."""
        return {"path": self.path, "version": self.version, "made_at": self.made_at, "own": self.own,
                "passed": list(self.passed), "enabled": self.enabled}


def make_v2(limit: int) -> Cgroup:
    root = next((r for r in V2_ROOTS if os.path.exists(os.path.join(r, "cgroup.controllers"))), None)
    if root is None:
        raise OSError(0, "no unified hierarchy mounted")
    controllers = _read(os.path.join(root, "cgroup.controllers")).split()
    if "memory" not in controllers:
        raise OSError(0, f"the unified hierarchy at {root} has no memory controller")
    own, passed = own_cgroup(2), []
    for level in _levels(own):
        why = _v2_refusal(root, level, own)
        if why is None:
            try:
                return _made(root, 2, "memory.max", limit, level, own, passed, "")
            except OSError as exc:
                why = f"a child there took no memory.max ({exc.strerror or exc})"
        passed.append(f"{level}: {why}")
    if "memory" not in _read(os.path.join(root, "cgroup.subtree_control")).split() and os.access(root, os.W_OK):
        try:
            _write(os.path.join(root, "cgroup.subtree_control"), "+memory")  # the root: no internal-process rule
            return _made(root, 2, "memory.max", limit, "/", own, passed[:-1], "/")  # [:-1]: the root's own refusal
        except OSError as exc:
            passed.append(f"/: +memory refused in its cgroup.subtree_control ({exc.strerror or exc})")
    raise OSError(0, "no level from this process's cgroup to the root can hold a memory cgroup: " + "; ".join(passed))


def _v2_refusal(root: str, level: str, own: str) -> str | None:
    """Why a child under ``level`` cannot get a memory limit, or None where it may."""
    here = os.path.join(root, level.lstrip("/"))
    if "memory" not in _read(os.path.join(here, "cgroup.subtree_control")).split():
        held = " and it holds processes (the no-internal-process rule)" if level == own and level != "/" else ""
        return f"memory not in its cgroup.subtree_control{held}"
    if not (os.access(here, os.W_OK) and os.access(os.path.join(here, "cgroup.procs"), os.W_OK)):
        return "not writable by this process"
    return None


def make_v1(limit: int, swap_total: int = 0) -> Cgroup:
    root = V1_ROOT
    if not os.path.exists(os.path.join(root, "memory.limit_in_bytes")):
        raise OSError(0, f"no v1 memory controller at {root}")
    own, passed = own_cgroup(1), []
    swap = "no swap on this machine" if swap_total == 0 else "swap allowed"
    for level in _levels(own):
        try:
            return _made(root, 1, "memory.limit_in_bytes", limit, level, own, passed, "", f" ({swap})")
        except OSError as exc:
            passed.append(f"{level}: {exc.strerror or exc}")
    raise OSError(0, "no level from this process's cgroup to the root took a child: " + "; ".join(passed))


def _levels(own: str) -> list[str]:
    """``own`` and each of its ancestors up to the root ``/``, nearest first."""
    parts = [p for p in own.split("/") if p]
    return ["/" + "/".join(parts[:n]) for n in range(len(parts), -1, -1)]


def _made(root: str, version: int, limit_file: str, limit: int, level: str, own: str, passed: list[str],
          enabled: str, said: str = "") -> Cgroup:
    """A new child under ``level`` with ``limit`` written to ``limit_file`` (removed again if that fails),
    and the stale children there reaped first."""
    parent = os.path.join(root, level.lstrip("/"))
    reaped = reap_stale(parent)
    from workbench.ledger.owner import current_owner

    me = current_owner()
    path = os.path.join(parent, f"{PREFIX}{me.pid}-{me.start_ticks}-{os.urandom(3).hex()}")
    _make_dir(path)
    try:
        _write(os.path.join(path, limit_file), str(limit))
    except OSError:
        remove_cgroup(path)
        raise
    made = Cgroup(path, version, "", reaped, level, own, tuple(passed), enabled)
    if version == 2:
        said = f", memory.swap.max {_read(os.path.join(path, 'memory.swap.max')) or 'n/a'}"
    return dataclasses.replace(made, detail=f"cgroup v{version} {path}: {limit_file} {limit / 2**20:,.0f} MiB{said}; "
                                            f"{made.where()}")


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


def _make_dir(path: str) -> None:
    os.mkdir(path)  # the kernel makes the child's interface files (a simulated tree's test replaces this)


def _write(path: str, text: str) -> None:
    """Write into an existing interface file: never create one (a child without the controller has none)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""
