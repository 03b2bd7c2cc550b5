"""What a turn under ``--memory-limit`` costs, split by what it hit: the model's own pages against
everything else (the process's libraries, its swapped memory, the rest of the machine).

Why this split: under a balloon the whole machine is squeezed, so a turn can slow down because the
kernel took the model's page cache (what the boundary-page leak is meant to cost) or because it took
the session's own libraries — the H200 run of 2026-12-03 had turns with 2,208 major faults on the
process's own libraries and ``compute_s`` 2.7–8.3 s against 0.05–0.4 s. One number mixes the two.

What is measured, and its limits:

* **The model** — its files' page-cache residency (mincore over every file of the model) at the
  turn's start and end, and every page seen resident so far in the session:
  ``model_lost_bytes`` pages resident at the start and gone at the end (reclaim took them);
  ``model_fetched_bytes`` pages absent at the start and resident at the end (read in this turn);
  ``model_reread_bytes`` those of them that had been resident earlier in the session (read again:
  the cost of reclaim on the model). All three are lower bounds: a page evicted and read back within
  one turn, or read and evicted again before it ends, is seen by neither snapshot.
  A session never *maps* the model (its readers ``pread``/O_DIRECT into its own memory), so **none of
  its major faults hit the model's files**: the model comes back by reads, counted here, not faults.
* **Everything else** — the process's major faults (``majflt``, getrusage) are all on its own
  file mappings (libraries, Python, CUDA; ``file_rss_bytes`` is its mapped file-backed resident set,
  ``RssFile``) or on its anonymous memory coming back from swap. ``other_fetched_bytes`` is
  ``read_bytes`` of ``/proc/self/io`` minus ``model_fetched_bytes`` (at least 0): an upper bound of
  the storage reads of other files, **not** a count of them — it also holds the model's own in-turn
  churn, pages read and evicted again within the turn (under pressure, most of them), and readahead
  of the model beyond what stayed resident, which neither mincore snapshot sees. Read it as "storage
  reads the model's end-of-turn residency does not explain", never as "other files".
* **The machine** — ``/proc/vmstat`` deltas over the turn: ``vm_majflt``, ``vm_swapin`` (pages),
  ``vm_refault_file``/``vm_refault_anon`` (workingset refaults), and ``swap_used_bytes`` (SwapTotal −
  SwapFree) at the end. They count every process: on a quiet machine under a balloon they are the
  session's plus the background's, so an upper bound of the session's; ``vm_swapin`` bounds how many
  of its major faults were swap-ins.

A reading that cannot be taken is -1, never 0.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

PAGE = 4096
_VMSTAT = {"pgmajfault": "vm_majflt", "pswpin": "vm_swapin", "workingset_refault_file": "vm_refault_file",
           "workingset_refault_anon": "vm_refault_anon"}
PRESSURE_TURN_KEYS = ("model_lost_bytes", "model_fetched_bytes", "model_reread_bytes", "other_fetched_bytes",
                      *_VMSTAT.values(), "swap_used_bytes")


class TurnPressure:
    """Readings around one turn at a time over the model's ``files`` (paths)."""

    def __init__(self, files: Sequence[str]):
        self.files = tuple(files)
        self._seen: dict[str, np.ndarray] = {}
        self._start: dict[str, np.ndarray] | None = None
        self._vm0: dict[str, int] = {}

    def before(self) -> None:
        """At the turn's start (outside its timing)."""
        self._start, self._vm0 = self._residency(), read_vmstat()

    def after(self, read_bytes: int) -> dict[str, Any]:
        """At the turn's end (outside its timing): the turn's readings (:data:`PRESSURE_TURN_KEYS`);
        ``read_bytes``: what the process read from storage during the turn."""
        end, vm1 = self._residency(), read_vmstat()
        out: dict[str, Any] = {key: -1 for key in PRESSURE_TURN_KEYS}
        if self._start is not None and end is not None:
            lost = fetched = reread = 0
            for path, now in end.items():
                then = self._start.get(path)
                seen = self._seen.get(path)
                if then is None or then.shape != now.shape:
                    continue
                new = now & ~then
                lost += int(np.count_nonzero(then & ~now))
                fetched += int(np.count_nonzero(new))
                reread += int(np.count_nonzero(new & seen)) if seen is not None else 0
                self._seen[path] = (seen if seen is not None else np.zeros_like(now)) | then | now
            out.update(model_lost_bytes=lost * PAGE, model_fetched_bytes=fetched * PAGE,
                       model_reread_bytes=reread * PAGE,
                       other_fetched_bytes=max(0, read_bytes - fetched * PAGE) if read_bytes >= 0 else -1)
        for key, name in _VMSTAT.items():
            if key in vm1 and key in self._vm0:
                out[name] = vm1[key] - self._vm0[key]
        out["swap_used_bytes"] = swap_used_bytes()
        return out

    def _residency(self) -> dict[str, np.ndarray] | None:
        from workbench.io.pagecache import resident_map

        try:
            return {path: resident_map(path) for path in self.files}
        except Exception:  # noqa: BLE001 - a file mincore cannot see (permissions, a vanished file): -1, not 0
            return None


def read_vmstat(path: str = "/proc/vmstat") -> dict[str, int]:
    """The counters of :data:`_VMSTAT` from /proc/vmstat ({} where unreadable)."""
    out: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key in _VMSTAT:
                    out[key] = int(value)
    except (OSError, ValueError):
        pass
    return out


def swap_used_bytes(path: str = "/proc/meminfo") -> int:
    """SwapTotal − SwapFree of the machine (-1 where unreadable)."""
    values: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("SwapTotal", "SwapFree"):
                    values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return -1
    return values["SwapTotal"] - values["SwapFree"] if len(values) == 2 else -1
