"""Long expert sessions as a measurement: one worker process, every turn in the ledger as it ends.

``measure_session(model, SessionConfig(...))`` holds the device lock for the whole session (cache
preparation included), puts a memory limit around it when ``config.memory_limit_mib`` asks
(:mod:`workbench.measure.session.pressure`), spawns ``python -m workbench.measure.session.worker`` and records
one ledger attempt (``kind="session"``) with one ``turns`` row per turn, written the moment the worker
reports it. A worker that dies, times out, is OOM-killed or is interrupted leaves its finished turns
recorded and its attempt ``failed`` with the reason (``oom-killed after N of M turns`` when the OOM
killer took it: the cgroup's count, or under a balloon the kernel's, rose while it ran). The summary
is rebuilt here from the turns, with the staged GB/s held against the read wall recorded for this
machine (``workbench ceilings``), so what the ledger holds and what the caller gets are the same numbers.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from workbench.errors import MeasurementInterrupted, ParamError
from workbench.expert.session_config import SessionConfig, check_config
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import SessionReport, summarize
from workbench.measure.lock.device import DeviceLock
from workbench.measure.lock.reaper import die_with_me
from workbench.measure.session.oom import exposed
from workbench.measure.session.record import Recorder, summary_line

if TYPE_CHECKING:
    from workbench.ledger import Ledger
    from workbench.measure.session.pressure import MemoryPressure

TurnCallback = Callable[[TurnRecord], None]


@dataclass(frozen=True)
class SessionResult:
    """One measured session: its ledger attempt, the turns, the summary (None when no turn ended)."""

    attempt_id: str
    file: str
    device: str
    cache: str
    resident_before: float | None
    report: SessionReport | None
    verdict: str
    notes: str
    error: str | None = None
    resident_files: Mapping[str, float] = field(default_factory=dict)  # per file of the model, before
    memory: str = ""  # how --memory-limit was enforced and what it cost ("" without one)
    memory_method: str = ""  # MemoryLimit.method: cgroup-v2, cgroup-v1, balloon ("" without a limit)
    memory_outcome: str = ""  # MemoryPressure.outcome: the OOM killer, reclaim and re-reads, or none seen
    memory_limit: str = ""  # MemoryLimit.detail: how the limit was enforced

    @property
    def memory_kind(self) -> str:
        """``OOM``, ``own-files``, ``reclaim``, ``killed`` or ``none``: what the limit cost, in a word ("" without
        a limit)."""
        return outcome_kind(self.memory_outcome) if self.memory_method else ""


OWN_FILES_KIND = "own-files"  # a balloon's squeeze reached the session's own files: the cell measures the method


def outcome_kind(outcome: str) -> str:
    """The word for :meth:`MemoryPressure.outcome`'s line: ``OOM``, ``own-files`` (the pressure reached
    the session's own files, so the cell measures the method, not the session), ``reclaim``, ``killed``
    (SIGKILL under a balloon, not from the OOM killer), ``none`` (or ``unknown``: the session ended
    before its outcome was read)."""
    from workbench.measure.session.pressure import KILLED, OWN_FILES

    if outcome.startswith("OOM"):
        return "OOM"
    if outcome.startswith(KILLED):
        return "killed"
    if outcome.startswith(OWN_FILES):
        return OWN_FILES_KIND
    if outcome.startswith("reclaim"):
        return "reclaim"
    return "none" if outcome.startswith("no pressure") else "unknown"


def measure_session(file: str, config: SessionConfig, *, device: str = "host", cache: str = "asis",
                    ledger: Ledger | str | os.PathLike[str] | None = None, campaign: str = "default",
                    hypothesis: str = "", label: str = "", timeout_s: float = 3600.0,
                    lock_dir: str | os.PathLike[str] | None = None, on_turn: TurnCallback | None = None,
                    memory_method: str = "auto", pressure: MemoryPressure | None = None,
                    on_start: Callable[[SessionFacts], None] | None = None) -> SessionResult:
    """Run one session of ``config`` on ``file`` (a model: one file or a set) in a worker process and
    record it; see the module doc.

    Parameters
    ----------
    cache
        Page-cache state of every file of the model set (and checked) before the session: cold, warm, asis.
    timeout_s
        The whole session's limit; past it the worker is killed and the attempt is ``failed``.
    on_turn
        Called with each turn's record as soon as it is in the ledger.
    on_start
        Called with the session's facts (its warnings among them) once the worker is up.
    memory_method
        How ``config.memory_limit_mib`` is enforced: ``auto`` (a cgroup, else a balloon), ``cgroup``, ``balloon``.
    pressure
        A limit the caller already holds (entered), used instead of making one: one balloon over every
        cell of an A/B, inflated once, outside every turn. ``config.memory_limit_mib`` must be set.
    """
    from workbench.measure.run.model import prepare_cache
    from workbench.measure.session.pressure import MemoryPressure
    from workbench.measure.run.runner import open_ledger

    index = preflight_session(file, config, device)
    store = open_ledger(ledger)
    run = Recorder(store, file, index, config, device, campaign, hypothesis, label or session_label(file, config),
                   on_turn, on_start)
    if pressure is not None and not config.memory_limit_mib:
        raise ParamError("session", "memory_limit", "a held memory limit needs config.memory_limit_mib")
    held = pressure is not None
    if not held and config.memory_limit_mib:
        pressure = MemoryPressure(config.memory_limit_mib, memory_method)
    try:
        with DeviceLock(device, lock_dir):
            prepared = prepare_cache(file, cache)  # every file of the model
            run.cache = cache if prepared.reached or cache == "asis" else \
                f"asis(unreachable: {cache}; {prepared.error})"[:300]
            run.resident_before, run.resident_files = prepared.resident, dict(prepared.files)
            run.open()  # before the worker starts: a runner killed now leaves the attempt, interrupted
            if pressure is None:
                run.error, _ = _spawn(file, config, device, timeout_s, run.on_event, {})
            else:
                with contextlib.nullcontext(pressure) if held else pressure:
                    limit = pressure.limit
                    run.memory_limit, run.memory_method = limit.detail, limit.method
                    store.describe_attempt(run.attempt_id, environment={"memory_limit": limit.record_json()})
                    pressure.mark_cell()
                    run.error, code = _spawn(file, config, device, timeout_s, run.on_event, limit.worker_json(),
                                             limit.pin_json(), limit.worker_oom_score_adj)
                    run.memory_outcome = _outcome(pressure, code, run.records, run.pin_text)
                    if run.memory_outcome.startswith("OOM"):  # the reason the attempt failed, in its words
                        run.failure = f"oom-killed after {len(run.records)} of {config.turns} turns"
                        run.error = f"{run.failure}: {run.error or 'the worker ended'}"
        run.finish(read_wall(store, run, device))  # a worker that stopped without its end event: failed
    except BaseException as exc:
        run.error = f"interrupted after {len(run.records)} turns: {type(exc).__name__}"
        stopped = isinstance(exc, KeyboardInterrupt) and not isinstance(exc, MeasurementInterrupted)
        run.interrupted = stopped  # Ctrl-C, SIGTERM or SIGHUP: the turns so far stay, the attempt says why
        run.finish(None)
        if stopped:
            raise MeasurementInterrupted(len(run.records), config.turns, [run.attempt_id], unit="turns") from exc
        raise
    finally:
        if store is not ledger:
            store.close()
    return run.result(SessionResult)


def preflight_session(file: str, config: SessionConfig, device: str) -> Any:
    """The model's index, or one line before anything is recorded: a missing or dense model, bad
    settings, a missing backend."""
    from workbench.errors import BackendUnavailable
    from workbench.expert.prefetch.predictors import check_fits
    from workbench.expert.prefetch.spec import parse_prefetch
    from workbench.expert.routing import load_trace, moe_shape
    from workbench.expert.session_bounds import check_for_model
    from workbench.expert.session_defaults import default_k
    from workbench.formats import open_index
    from workbench.upload import DEVICES, device_availability

    check_config(config)
    index = open_index(file)
    if not index.blobs:
        raise ParamError("session", "file", f"{file} has no expert blobs: a session needs a MoE model")
    layers, n_experts = moe_shape(index.blobs)
    check_for_model(config, len(layers), n_experts, default_k(n_experts))  # k, the trace's size: before recording
    k = config.experts_per_token or default_k(n_experts)
    if config.trace is not None:
        k = load_trace(config.trace, layers=layers, n_experts=n_experts).k
    check_fits(parse_prefetch(config.prefetch), k, n_experts)  # a degraded oracle this model cannot have
    if config.miss != "fetch":  # a type neither numpy nor gguf-py computes: --miss host/auto refused here
        from workbench.expert.miss.host import check_host_computable
        check_host_computable(index)
    name = device.partition(":")[0]
    avail = device_availability(name)
    if not avail:
        raise BackendUnavailable(name, avail.reason, DEVICES.entries[name].hint)
    return index


def _spawn(file: str, config: SessionConfig, device: str, timeout_s: float,
           on_event: Callable[[dict[str, Any]], None], cgroup: dict,
           pin: dict | None = None, oom_score_adj: int | None = None) -> tuple[str | None, int | None]:
    """Run the worker, handing each event line to ``on_event``: (the error or None, its exit code).
    ``oom_score_adj``: under a balloon the worker raises its own before exec (the OOM killer's victim)."""
    payload = {"file": file, "device": device, "session": dataclasses.asdict(config), "cgroup": cgroup,
               "pin": pin or {}}
    cmd = [sys.executable, "-m", "workbench.measure.session.worker", "-"]
    preexec = die_with_me()  # a runner killed mid-session leaves no worker
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:  # a file: a chatty worker never blocks
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
                                preexec_fn=preexec if oom_score_adj is None else exposed(preexec, oom_score_adj))
        timed_out = threading.Event()
        timer = threading.Timer(timeout_s, lambda: (timed_out.set(), _kill(proc)))
        timer.start()
        try:
            proc.stdin.write(json.dumps(payload))
            proc.stdin.close()
            for line in proc.stdout:
                if line.startswith("{"):
                    on_event(json.loads(line))
            proc.wait()
        except BaseException:  # Ctrl-C, or a ledger write that failed: the worker must not live on
            _kill(proc)
            proc.wait()
            raise
        finally:
            timer.cancel()
        err.seek(0)
        tail = err.read().strip()[-2000:]
    if timed_out.is_set() and proc.returncode != 0:
        return f"session timed out after {timeout_s:g} s", proc.returncode
    if proc.returncode != 0:
        last = tail.splitlines()[-1] if tail else "no stderr"
        if proc.returncode == -signal.SIGKILL and not tail:
            last = "killed (SIGKILL)"
        return f"session worker exit {proc.returncode}: {last}", proc.returncode
    return None, 0


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker's whole process group (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _outcome(pressure: Any, code: int | None, records: list[TurnRecord], pinned: str = "") -> str:
    known = lambda key: sum(max(0, getattr(r, key)) for r in records)  # noqa: E731
    cgroup = any(r.cg_refaults >= 0 for r in records)
    refaults = known("cg_refaults") if cgroup else known("vm_refault_file") + known("vm_refault_anon")
    said = pressure.outcome(code, refaults, sum(r.majflt for r in records), known("cg_limit_hits"),
                            known("model_reread_bytes"), [r.majflt for r in records], known("cg_lazyfreed"))
    said = f"{said}, after {len(records)} turns" if said.startswith("OOM") else said
    return f"{said}; {pinned}" if pinned else said


def read_wall(ledger: Ledger, run: Recorder, device: str) -> tuple[str, float] | None:
    """The machine's read wall for the session's misses: the disk when most bytes came from it, else
    the page cache at the lanes' thread count (None where ``workbench ceilings`` never ran here)."""
    from workbench.measure.session.wall import session_wall

    return session_wall(run.walls, run.records, run.facts) if run.records else None


def session_label(file: str, config: SessionConfig) -> str:
    """``session inplace release=off lanes=4 overlap compute=device 20×64 cache=2000MiB · model``."""
    extra = "".join([f" lanes={config.lanes}" if config.lanes > 1 else "", " overlap" if config.overlap else "",
                     f" prefetch={config.prefetch}" if config.prefetch != "route" else "",
                     f" miss={config.miss}" if config.miss != "fetch" else "",
                     " batch-misses" if config.batch_misses else "",
                     f" schedule={config.schedule}" if config.schedule != "landed" else "",
                     f" switch={config.switch_interval_us}us" if config.switch_interval_us else "",
                     f" handoff={config.lane_handoff}" if config.lane_handoff != "executor" else "",
                     f" compute={config.compute}" if config.compute != "none" else "",
                     f" advice={config.release_advice}" if config.release_advice != "dontneed" else "",
                     f" uploader={config.uploader}" if config.uploader != "pageable" else "",
                     f" upload_threads={config.upload_threads}" if config.upload_threads > 1 else "",
                     f" mem={config.memory_limit_mib:g}MiB" if config.memory_limit_mib else "",
                     f" policy={config.policy}" if config.policy != "lru" else ""])
    from workbench.measure.run.model import model_name

    cache = (f"{config.cache_mib:g}MiB" if config.cache_mib else
             f"{config.cache_experts}/layer" if config.cache_experts else "default")
    return (f"session {config.placement} release={config.boundary_release}{extra} {config.turns}×{config.tokens} "
            f"cache={cache} · {model_name(file)}")


__all__ = ["SessionResult", "measure_session", "preflight_session", "session_label", "summary_line", "summarize"]
