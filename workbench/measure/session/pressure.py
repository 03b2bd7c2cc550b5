"""``--memory-limit``: run a session under a real memory limit, and say how it was enforced.

In order of preference:

* a **memory cgroup** made for the session as a child of the cgroup this process runs in (so it stays
  inside whatever limit the machine already puts on us), else of the nearest ancestor that can hold one,
  the root included (:mod:`workbench.measure.session.cgroups` says the rule; the H200's is the root):
  cgroup v2 ``memory.max`` where the unified hierarchy has the memory controller, else v1
  ``memory.limit_in_bytes``. Where it was made is in :attr:`MemoryLimit.detail` and
  :meth:`MemoryLimit.record_json` (the attempt's ``environment["memory_limit"]``). The worker joins it first
  thing (:func:`join_cgroup`), so everything it allocates *and the page cache it reads in* is
  charged to it. Pages another process already cached stay charged to that process: start the
  session cold for the limit to hold the model's pages too;
* else a **locked balloon** (:mod:`workbench.measure.session.balloon`): this process maps and ``mlock``\\ s what is
  available beyond the limit *plus the machine's own working set* (measured as it inflates: the file
  pages every process maps, and the session worker's own), so the session gets its limit and the
  machine keeps its libraries. The whole machine still feels it; what a turn's pressure hit — the
  model's pages or everything else — is recorded per turn (:mod:`workbench.expert.pressure_turn`).
  Part of what it leaves, the worker's own file pages, the worker then locks after its warm-up turn
  (:mod:`workbench.io.own_pages`): the protection a cgroup gives them by charging them to the runner
  that cached them. A cell whose own major faults still run above :data:`OWN_FAULTS_PER_TURN` a turn
  after turn 0 measured the method, not the session, and :meth:`MemoryPressure.outcome` says so.
  Once it is inflated the holder is never the OOM killer's victim, the worker is
  (:mod:`workbench.measure.session.oom`): a cell it kills is recorded ``OOM-killed`` with the turns it
  finished, and the next cell runs;
* else a one-line refusal naming why neither worked.

Without swap the cost of a leak shows as reclaim of the page cache and re-reads (refaults, major
faults, bytes read from the disk again) and finally the OOM killer: :meth:`MemoryPressure.outcome`
says which happened.
"""
from __future__ import annotations

import mmap
import signal
from dataclasses import dataclass
from typing import Any, Sequence

from workbench.errors import ParamError
from workbench.measure.session import cgroups
from workbench.measure.session.balloon import Balloon, measure_working_set, meminfo
from workbench.measure.session.cgroups import join_cgroup
from workbench.measure.session.oom import EXPOSED, Protection, machine_oom_kills, protect_holder, unprotect_holder

MiB = 1 << 20
METHODS = ("auto", "cgroup", "balloon")
# A session never maps the model, so every major fault is on its own files (libraries, Python, CUDA) or
# its swapped memory. Unlimited it faults them only while it warms up: on the H200 (2026-12-03, 4 GiB
# GGUF, cuda) the probe had 11 in turn 0 and 0 in turns 1–2, and balloon cells 0–1 in turn 1 before
# the squeeze began; a code path first used later (a stray lazy import) costs a few. Above this many
# a turn on average after turn 0 the squeeze is evicting the session's own pages: the cell's turns
# carry the cost of the method (the H200 cells: 400–1,160 a turn, compute_s 3.5–30 s a cell against 0.06 s a turn).
OWN_FAULTS_PER_TURN = 4
OWN_FILES = "pressure reached the session's own files"
KILLED = "killed by SIGKILL, not the OOM killer"


@dataclass(frozen=True)
class MemoryLimit:
    """How the limit is enforced: ``cgroup-v2``, ``cgroup-v1`` or ``balloon``."""

    method: str
    limit_bytes: int
    path: str = ""  # the cgroup directory
    version: int = 0
    detail: str = ""
    working_set_bytes: int = 0  # a balloon: what it left beside the limit for the machine's own working set
    inflate_s: float = 0.0  # a balloon: how long locking it took (before any turn)
    worker_file_bytes: int = 0  # a balloon: the part of that working set left for the worker's own file pages
    cgroup: cgroups.Cgroup | None = None  # a cgroup: where it was made, and why not nearer
    holder_oom_score_adj: int | None = None  # a balloon: the holder's score once inflated (-1000 where allowed)

    @property
    def worker_oom_score_adj(self) -> int | None:
        """What each worker sets its ``oom_score_adj`` to before exec: +1000 under a balloon, else None."""
        return EXPOSED if self.method == "balloon" else None

    def record_json(self) -> dict[str, Any]:
        """How the limit was enforced, for the attempt's ``environment["memory_limit"]``."""
        out: dict[str, Any] = {"method": self.method, "limit_bytes": self.limit_bytes, "detail": self.detail}
        if self.cgroup is not None:
            out["cgroup"] = self.cgroup.record_json()
        if self.method == "balloon":
            out.update(holder_oom_score_adj=self.holder_oom_score_adj, worker_oom_score_adj=EXPOSED)
        return out

    def worker_json(self) -> dict:
        """What the worker needs to join the cgroup and read it ({} for a balloon)."""
        return {"path": self.path, "version": self.version} if self.path else {}

    def pin_json(self) -> dict:
        """What the worker needs to lock its own file pages after turn 0: under a balloon, the room left
        for them; under a cgroup nothing ({}: the runner that cached the libraries is charged for them,
        so the session's limit never reclaims them)."""
        return {"budget_bytes": self.worker_file_bytes} if self.method == "balloon" else {}


class MemoryPressure:
    """A memory limit held from ``__enter__`` to ``__exit__`` (``method``: auto, cgroup or balloon)."""

    def __init__(self, limit_mib: float, method: str = "auto", *, worker_file_bytes: int | None = None):
        if method not in METHODS:
            raise ParamError("session", "memory_limit_method", f"{method!r} is not one of {', '.join(METHODS)}")
        if not limit_mib > 0:
            raise ParamError("session", "memory_limit", f"must be > 0 MiB, got {limit_mib!r}")
        self.limit_bytes, self.method = int(limit_mib * MiB), method
        self.limit: MemoryLimit | None = None
        self.worker_file_bytes = worker_file_bytes  # the worker's RssFile, measured (a balloon's working set)
        self._balloon: Balloon | None = None
        self._protection: Protection | None = None
        self._oom_before = 0
        self._machine_oom_before = -1

    def __enter__(self) -> "MemoryPressure":
        why = []
        if self.method in ("auto", "cgroup"):
            for make in (cgroups.make_v2, _make_v1):
                try:
                    made = make(self.limit_bytes)
                    reaped = f"; removed {len(made.reaped)} stale cgroup(s) of runners gone" if made.reaped else ""
                    self.limit = MemoryLimit(f"cgroup-v{made.version}", self.limit_bytes, made.path, made.version,
                                             made.detail + reaped, cgroup=made)
                    break
                except OSError as exc:
                    why.append(f"v{2 if make is cgroups.make_v2 else 1}: {exc.strerror or exc}")
        if self.limit is None and self.method in ("auto", "balloon"):
            try:
                self.limit = self._inflate()
            except OSError as exc:
                why.append(f"balloon: {exc.strerror or exc}")
        if self.limit is None:
            raise ParamError("session", "memory_limit", "cannot enforce it here: " + "; ".join(why))
        self._oom_before = self.oom_kills()
        self.mark_cell()
        return self

    def mark_cell(self) -> None:
        """A cell starts now: the kernel's OOM kills so far, against which its end is judged."""
        self._machine_oom_before = machine_oom_kills()

    def _inflate(self) -> MemoryLimit:
        available, working = meminfo("MemAvailable"), measure_working_set(self.worker_file_bytes)
        left = self.limit_bytes + working.bytes
        size = available - left
        if size <= 0:
            raise OSError(0, f"only {available / MiB:,.0f} MiB available, not more than the limit and "
                          f"{working.text()}")
        self._balloon = Balloon(size).inflate()
        self._protection = protect_holder()  # after inflating: a balloon the machine cannot give should die
        b = self._balloon
        return MemoryLimit("balloon", self.limit_bytes, holder_oom_score_adj=self._protection.now, detail=(
            f"balloon: {size / MiB:,.0f} MiB locked of {available / MiB:,.0f} MiB available in {b.inflate_s:.1f} s "
            f"({b.threads} threads, before the session); {left / MiB:,.0f} MiB left = the limit "
            f"{self.limit_bytes / MiB:,.0f} MiB + {working.text()}; the worker locks its own resident file "
            f"pages after turn 0, at most the {working.worker_file_bytes / MiB:,.0f} MiB left for them; "
            f"{self._protection.text()}"),
            working_set_bytes=working.bytes, inflate_s=b.inflate_s, worker_file_bytes=working.worker_file_bytes)

    def oom_kills(self) -> int:
        """The cgroup's OOM kills so far (-1 for a balloon, or where the kernel keeps none)."""
        lim = self.limit
        if lim is None or not lim.path:
            return -1
        from workbench.expert.procstat import CgroupProbe

        return CgroupProbe(lim.path, lim.version).read().oom_kills

    def outcome(self, returncode: int | None, refaults: int, majflt: int, limit_hits: int,
                model_reread_bytes: int = 0, turn_majflt: Sequence[int] = (), lazyfreed: int = 0) -> str:
        """Which cost the limit had: the OOM killer, the pressure on the session's own files (a balloon
        whose squeeze still faulted them more than :data:`OWN_FAULTS_PER_TURN` a turn after turn 0, given
        ``turn_majflt``, each turn's major faults), reclaim and re-reads, or none seen. Under a balloon
        ``refaults`` are the machine's (the session's and anyone else's). ``lazyfreed``: pages the cache
        had handed back with MADV_FREE that the cgroup's reclaim took — a limit hit they explain, with no
        refault and nothing of the model read again, is no pressure on the session (the kernel took what
        was already released)."""
        kills = self.oom_kills()
        balloon = self.limit is not None and not self.limit.path
        if kills > self._oom_before:
            return f"OOM-killed (cgroup oom_kill +{kills - self._oom_before})"
        if returncode == -signal.SIGKILL and balloon:
            return self._killed_under_balloon()
        after = [max(0, n) for n in turn_majflt[1:]]
        if balloon and after and sum(after) > OWN_FAULTS_PER_TURN * len(after):
            return (f"{OWN_FILES}: {sum(after):,} major faults in the {len(after)} turns after turn 0 "
                    f"({sum(after) / len(after):,.0f} a turn, more than {OWN_FAULTS_PER_TURN}; none on the model, "
                    "which a session never maps): the balloon squeezed the whole machine, so this cell measures "
                    f"the method, not the session ({max(0, refaults):,} refaults of the machine's, the model's "
                    f"pages read again {model_reread_bytes / MiB:,.1f} MiB)")
        if lazyfreed > 0 and not balloon and refaults <= 0 and model_reread_bytes <= 0:
            return (f"no pressure seen beyond released pages: the limit was hit {max(0, limit_hits):,} times and "
                    f"reclaim took {lazyfreed * mmap.PAGESIZE / MiB:,.1f} MiB the cache had handed back with MADV_FREE; "
                    "no refaults, none of the model read again")
        if limit_hits > 0 or model_reread_bytes > 0 or (balloon and refaults > 0):
            hits = "" if balloon else f"the limit was hit {max(0, limit_hits):,} times, "
            whose = " (the machine's)" if balloon else ""
            return (f"reclaim and re-reads: {hits}{max(0, refaults):,} refaults{whose}, {majflt:,} major faults "
                    f"(none on the model: a session reads it, never maps it), the model's pages read again "
                    f"{model_reread_bytes / MiB:,.1f} MiB")
        if refaults > 0:  # a cgroup that was never full: its pages were reclaimed by the machine, not the limit
            return (f"no pressure seen (the limit was never hit; {refaults:,} refaults of pages the machine "
                    f"reclaimed, not the limit)")
        return "no pressure seen (the session stayed under the limit)"

    def _killed_under_balloon(self) -> str:
        """A worker dead of SIGKILL under a balloon: the OOM killer's when the kernel's count rose meanwhile."""
        now, before = machine_oom_kills(), self._machine_oom_before
        if now < 0 or before < 0:
            return "OOM-killed (SIGKILL under a balloon; this kernel keeps no oom_kill count to confirm it)"
        if now > before:
            return f"OOM-killed (the kernel's OOM killer: /proc/vmstat oom_kill +{now - before} while the cell ran)"
        return f"{KILLED} (/proc/vmstat oom_kill unchanged while the cell ran: a timeout or another process)"

    def __exit__(self, *exc: object) -> None:
        if self._balloon is not None:
            self._balloon.deflate()
            self._balloon = None
        if self._protection is not None:  # after the balloon is gone: never exposed while holding it
            unprotect_holder(self._protection)
            self._protection = None
        if self.limit is not None and self.limit.path:
            cgroups.remove_cgroup(self.limit.path)


def held_for_cells(limit_mib: float) -> MemoryPressure | None:
    """The pressure to hold over every cell of an A/B under one limit: None where a cgroup can be made
    (each cell gets a fresh one, confined to it), else a balloon, to be inflated once before the first
    cell instead of once per cell (~60 s at 120 GB on the H200)."""
    try:
        with MemoryPressure(limit_mib, "cgroup"):
            return None
    except ParamError:
        return MemoryPressure(limit_mib, "balloon")


def _make_v1(limit: int) -> cgroups.Cgroup:
    return cgroups.make_v1(limit, swap_total=meminfo("SwapTotal"))


__all__ = ["KILLED", "METHODS", "OWN_FAULTS_PER_TURN", "OWN_FILES", "MemoryLimit", "MemoryPressure", "held_for_cells",
           "join_cgroup"]
