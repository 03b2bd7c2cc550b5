"""Which mount holds a path: its file system type, mount point and source, from /proc/mounts."""
from __future__ import annotations

import os


def mount_of(path: str | os.PathLike) -> tuple[str, str, str]:
    """(file system type, mount point, source) holding ``path``, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("unknown", "/", "")
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best[1]):  # later mounts shadow earlier ones at the same point
            best = (parts[2], mnt, parts[0])
    return best


def filesystem_type(path: str | os.PathLike) -> str:
    """The file system type (ext4, xfs, tmpfs, ...) holding ``path``."""
    return mount_of(path)[0]
