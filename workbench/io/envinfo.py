"""Host and file-system facts a result was measured in: machine, kernel, CPU, RAM, commit, and the
file system of the model's directory. ``workbench.measure.run.environment`` adds the device backends.

Everything here is cheap: files under /proc and /sys, one 64 KiB probe file in the directory, two git
calls.
"""
from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

from workbench.settings.defaults import host_id
from workbench.errors import ParamError
from workbench.io import pagecache
from workbench.io.hostmem import memory_reporting
from workbench.io.direct import direct_io_support, logical_block_size
from workbench.output.owned import make_owned
from workbench.registry import Availability

PROBE_BYTES = 64 << 10


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Processor", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def eviction_support(directory: str | os.PathLike) -> Availability:
    """Whether fadvise(DONTNEED) really drops file pages here: a probe file is warmed, evicted, measured."""
    try:
        fd, tmp = make_owned(directory, ".wb-evict-")  # a probe killed here is reaped by the next one
    except OSError as exc:
        return Availability(False, f"untested: cannot create a file in {directory} ({exc.strerror})")
    try:
        os.write(fd, os.urandom(PROBE_BYTES))
        os.fsync(fd)
        pagecache.warm_file(tmp)
        pagecache.evict_file_pages(tmp)
        left = pagecache.resident_fraction(tmp)
        if left <= 0.02:
            return Availability(True)
        fs = pagecache.filesystem_type(tmp)
        return Availability(False, f"{left:.0%} of a probe file stays resident after DONTNEED on {fs}")
    except Exception as exc:  # noqa: BLE001 - any failure is the answer "does not work", with why
        return Availability(False, f"probe failed: {exc}")
    finally:
        os.close(fd)
        os.unlink(tmp)


def _git_facts() -> dict[str, Any]:
    """Commit and dirty flag when the package runs from a git checkout of this project; else nothing."""
    pkg = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(pkg), *args], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()

    try:
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        if top / "workbench" != pkg:  # an installed copy that merely sits inside some other repository
            return {}
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {}


def directory_facts(directory: str | os.PathLike) -> dict[str, Any]:
    """``directory``'s file system: type, mount, O_DIRECT support and block size, and whether
    page-cache eviction works there (probed)."""
    real = os.path.realpath(directory)
    if not os.path.exists(real):
        raise ParamError("environment", "directory", f"{directory}: no such file or directory")
    fs, mount_point, source = pagecache.mount_of(real)
    odirect = direct_io_support(real)
    evict = eviction_support(real if os.path.isdir(real) else os.path.dirname(real))
    return {
        "dir": real, "fs_type": fs, "mount_point": mount_point, "fs_source": source,
        "o_direct": odirect.ok, "o_direct_reason": odirect.reason,
        "logical_block_size": logical_block_size(real),
        "page_cache_eviction": evict.ok, "page_cache_eviction_reason": evict.reason,
    }


def host_facts() -> dict[str, Any]:
    """This machine: Python, kernel, CPU, cores, RAM, page size, the workbench commit, and whether the
    VM hands freed memory back to its hypervisor (a timing confounder)."""
    uname = platform.uname()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    facts: dict[str, Any] = {
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "kernel": f"{uname.system} {uname.release} {uname.version}", "machine": uname.machine,
        "hostname": socket.gethostname(), "host": host_id(), "cpu_model": cpu_model(),
        "cores": os.cpu_count() or 0, "cores_usable": usable,
        "ram_bytes": _ram_bytes(), "page_size": pagecache.page_size(),
    }
    facts.update(_git_facts())
    facts["memory_reporting"] = memory_reporting()
    return facts
