"""What one run reported, typed: the one message a worker process prints and its parent reads back.

The worker (``measure/run/worker.py``) builds a :class:`WorkerReport` and prints ``to_json()``; the spawner
(``measure/run/spawn.py``) reads it with ``from_json``; an external engine's run and the runner's own notes
about a run (the cache state it could not reach, memory the VM handed back) live in the same object.
``to_json`` writes exactly the keys the ledger's ``runs.result`` column has always held, so ledgers
written before these types existed read back unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from workbench.records.cache_recheck import CacheRecheck
from workbench.records.costs import RunCosts
from workbench.records.engaged import Engaged
from workbench.records.external import ExternalRun
from workbench.records.ranks import RanksSummary


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class LoadPath:
    """What a load actually did, which decides the wall it is up against: how many threads read the
    file at once, what host memory the device copied from, and whether reads bypassed the cache."""

    readers: int = 1
    copy_from: str = "pageable"
    direct: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"readers": self.readers, "copy_from": self.copy_from, "direct": self.direct}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadPath:
        return cls(int(data.get("readers", 1)), str(data.get("copy_from", "pageable")), bool(data.get("direct", False)))


@dataclass(frozen=True)
class LoadSummary:
    """A strategy's load as JSON can carry it: its ``LoadResult`` without the device handles."""

    strategy: str
    params: Mapping[str, Any]
    device: str
    bytes: int
    n_tensors: int
    load_s: float
    gbps: float
    phases: Mapping[str, float]
    minflt: int
    majflt: int
    evict: bool
    evict_source: str
    engaged: tuple[Engaged, ...] = ()
    notes: tuple[str, ...] = ()
    counters: Mapping[str, int] = field(default_factory=dict)
    path: LoadPath = field(default_factory=LoadPath)

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy, "params": dict(self.params), "device": self.device, "bytes": self.bytes,
            "n_tensors": self.n_tensors, "load_s": self.load_s, "gbps": self.gbps, "phases": dict(self.phases),
            "minflt": self.minflt, "majflt": self.majflt, "evict": self.evict, "evict_source": self.evict_source,
            "engaged": [e.to_json() for e in self.engaged], "notes": list(self.notes),
            "counters": dict(self.counters), "path": self.path.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadSummary:
        return cls(
            strategy=str(data.get("strategy", "")), params=dict(data.get("params") or {}),
            device=str(data.get("device", "")), bytes=int(data.get("bytes", 0)),
            n_tensors=int(data.get("n_tensors", 0)), load_s=float(data.get("load_s", 0.0)),
            gbps=float(data.get("gbps", 0.0)),
            phases={k: float(v) for k, v in (data.get("phases") or {}).items()},
            minflt=int(data.get("minflt", 0)), majflt=int(data.get("majflt", 0)),
            evict=bool(data.get("evict", False)), evict_source=str(data.get("evict_source", "")),
            engaged=tuple(Engaged.from_json(e) for e in data.get("engaged") or ()),
            notes=tuple(map(str, data.get("notes") or ())), counters=dict(data.get("counters") or {}),
            path=LoadPath.from_json(data.get("path") or {}),
        )


@dataclass(frozen=True)
class VerifySummary:
    """The device bytes read back after the window: ``ok`` only when all ``total`` tensors matched."""

    ok: bool
    checked: int
    total: int
    mismatches: int
    first_mismatch: str | None = None
    detail: str = ""  # why it failed: which bytes differ, or the file changed since it was indexed

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, "checked": self.checked, "total": self.total, "mismatches": self.mismatches,
               "first_mismatch": self.first_mismatch}
        if self.detail:  # only when there is one: ledgers written before it hold the other keys only
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> VerifySummary:
        first = data.get("first_mismatch")
        return cls(bool(data["ok"]), int(data.get("checked", 0)), int(data.get("total", 0)),
                   int(data.get("mismatches", 0)), None if first is None else str(first),
                   str(data.get("detail") or ""))


@dataclass(frozen=True)
class Timings:
    """Where a worker process's time went, on one clock (seconds); ``window_imports`` are modules
    still imported inside the load window (start-up cost that leaked into the measurement).
    ``prepare_s`` is the part of ``init_s`` the strategy's own pre-window hook took (a peer's library
    import and CUDA context); None in reports written before the hook existed."""

    startup_s: float | None  # parent's spawn → the worker's first line (None without the spawn time)
    import_s: float
    init_s: float
    window_s: float
    verify_s: float
    total_s: float
    window_imports: tuple[str, ...] = ()
    prepare_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"startup_s": self.startup_s, "import_s": self.import_s, "init_s": self.init_s,
               "window_s": self.window_s, "verify_s": self.verify_s, "total_s": self.total_s,
               "window_imports": list(self.window_imports)}
        if self.prepare_s is not None:  # absent in older reports: they read back with the keys they had
            out["prepare_s"] = self.prepare_s
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timings:
        return cls(_opt_float(data.get("startup_s")), float(data.get("import_s", 0.0)),
                   float(data.get("init_s", 0.0)), float(data.get("window_s", 0.0)),
                   float(data.get("verify_s", 0.0)), float(data.get("total_s", 0.0)),
                   tuple(map(str, data.get("window_imports") or ())), _opt_float(data.get("prepare_s")))


@dataclass(frozen=True)
class WorkerReport:
    """Everything one run reported. ``load`` is set when a worker loaded with a strategy, ``external``
    when an external engine ran; a run that died before reporting has neither. ``cache_error`` and
    ``host_memory_reported_mib`` are the runner's own notes around the run."""

    pid: int | None = None
    device_info: Mapping[str, Any] = field(default_factory=dict)  # open: each backend says what it knows
    file: str = ""
    strategy: str = ""
    device: str = ""
    load_s: float | None = None  # the load window (index + load)
    init_s: float | None = None  # device init, before the window
    index_s: float | None = None
    verify_s: float | None = None
    load: LoadSummary | None = None
    verified: bool | None = None
    verify: VerifySummary | None = None
    resident_after: float | None = None
    timings: Timings | None = None
    external: ExternalRun | None = None
    host_memory_reported_mib: float | None = None  # memory the VM handed back around the run
    cache_error: str | None = None  # why the page-cache state asked for was not reached
    resident_after_files: Mapping[str, float] = field(default_factory=dict)  # file name → fraction after the load
    costs: RunCosts | None = None  # bytes read, CPU, switches and memory over the window (worker runs)
    cache_recheck: CacheRecheck | None = None  # the worker's own look at the cache just before its window
    ranks: RanksSummary | None = None  # a load across several ranks: each rank's numbers (measure/ranks/)

    def to_json(self) -> dict[str, Any]:
        """The JSON object the worker prints and the ledger stores (``runs.result``)."""
        out: dict[str, Any] = {}
        if self.load is not None:
            out.update(self._worker_json(self.load))
        if self.external is not None:
            out.update(pid=self.pid, **self.external.to_json(), device_info=dict(self.device_info))
        if self.host_memory_reported_mib is not None:
            out["host_memory_reported_mib"] = self.host_memory_reported_mib
        if self.cache_error is not None:
            out["cache_error"] = self.cache_error
        return out

    def _worker_json(self, load: LoadSummary) -> dict[str, Any]:
        return {
            "pid": self.pid, "file": self.file, "strategy": self.strategy, "device": self.device,
            "device_info": dict(self.device_info), "load_s": self.load_s, "init_s": self.init_s,
            "index_s": self.index_s, "verify_s": self.verify_s, "result": load.to_json(),
            "verified": self.verified, "verify": None if self.verify is None else self.verify.to_json(),
            "resident_after": self.resident_after,
            "timings": None if self.timings is None else self.timings.to_json(),
            # only when measured: reports written before a model was a set of files hold the other keys
            **({"resident_after_files": dict(self.resident_after_files)} if self.resident_after_files else {}),
            **({"costs": self.costs.to_json()} if self.costs is not None else {}),
            **({"cache_recheck": self.cache_recheck.to_json()} if self.cache_recheck is not None else {}),
            **({"ranks": self.ranks.to_json()} if self.ranks is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerReport:
        """A report back from :meth:`to_json` (a worker's stdout or a ledger row)."""
        notes = {"host_memory_reported_mib": _opt_float(data.get("host_memory_reported_mib")),
                 "cache_error": None if data.get("cache_error") is None else str(data["cache_error"])}
        common = {"pid": _opt_int(data.get("pid")), "device_info": dict(data.get("device_info") or {})}
        if "result" in data:
            return cls(**common, **cls._worker_fields(data), **notes)
        if "cmd" in data:
            return cls(**common, external=ExternalRun.from_json(data), **notes)
        return cls(**notes)

    @staticmethod
    def _worker_fields(data: Mapping[str, Any]) -> dict[str, Any]:
        verify, timings, verified = data.get("verify"), data.get("timings"), data.get("verified")
        return {
            "file": str(data.get("file", "")), "strategy": str(data.get("strategy", "")),
            "device": str(data.get("device", "")), "load_s": _opt_float(data.get("load_s")),
            "init_s": _opt_float(data.get("init_s")), "index_s": _opt_float(data.get("index_s")),
            "verify_s": _opt_float(data.get("verify_s")), "load": LoadSummary.from_json(data["result"] or {}),
            "verified": None if verified is None else bool(verified),
            "verify": None if verify is None else VerifySummary.from_json(verify),
            "resident_after": _opt_float(data.get("resident_after")),
            "timings": None if timings is None else Timings.from_json(timings),
            "resident_after_files": {str(k): float(v) for k, v in (data.get("resident_after_files") or {}).items()},
            "costs": RunCosts.from_json(data["costs"]) if isinstance(data.get("costs"), Mapping) else None,
            "cache_recheck": (CacheRecheck.from_json(data["cache_recheck"])
                              if isinstance(data.get("cache_recheck"), Mapping) else None),
            "ranks": RanksSummary.from_json(data["ranks"]) if isinstance(data.get("ranks"), Mapping) else None,
        }
