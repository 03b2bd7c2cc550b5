"""One field of a process's ``/proc/<pid>/status``: what the session balloon, the run's costs and the
own-pages lock read (VmRSS, VmHWM, RssFile, VmLck) — one reader, so a parse fix lands everywhere."""
from __future__ import annotations


def status_bytes(key: str, path: str = "/proc/self/status") -> int | None:
    """The ``key:`` line's value in bytes (the kernel writes these fields in kB); None where the file
    or the field cannot be read."""
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
