"""External engine mode: time other programs' loads, from spawn (or a start-marker line) to an end-marker
line, then kill them; compare several engine commands interleaved like strategies.

The command runs as an argument list (no shell unless asked) under a reaper in its own session
(:mod:`workbench.measure.lock.reaper`), with stdout and stderr on a pseudo-terminal, so a C or Python program
line-buffers its output as it would in a terminal: with a plain pipe, stdio's block buffering would hold
the marker line back and silently add time to the measurement. Every line (split on ``\\n`` or ``\\r``)
up to the end marker is read for the engine's own phase lines (:mod:`workbench.measure.engine.output`);
at the end marker the clock stops and everything the engine started is killed — its process group and
any process that left it — so prompt evaluation and generation are never timed and nothing lives on.
"""
from __future__ import annotations

import os
import pty
import re
import subprocess
import time
from typing import Any, Mapping, Sequence

from workbench.errors import FormatError, ParamError, WorkbenchError
from workbench.measure.run.attempt import AttemptResult
from workbench.measure.engine.build import within
from workbench.measure.engine.sampler import TreeSampler
from workbench.measure.engine.target import ReadTarget
from workbench.measure.engine.output import (
    LINE_CHARS, MAX_LINE, LineSplitter, Watch as _Watch, read_after_marker, read_until_marker, sum_phases,
)
from workbench.measure.engine.command import (
    EngineCommand, check_command, compile_patterns, default_labels, identify,
)
from workbench.measure.run.order import DEFAULT_ORDER
from workbench.measure.lock import reaper
from workbench.measure.run.spawn import Outcome
from workbench.records import ExternalRun, ReadEvidence, RunConfig, WorkerReport

EXIT_GRACE_S = 0.5  # how long an engine may take to exit on its own after the marker before it is killed


def compile_marker(marker: str) -> re.Pattern[str]:
    """The marker as a regex; a bad pattern is a ParamError naming it."""
    from workbench.measure.engine.command import compile_pattern

    return compile_pattern(marker, "--marker")


def time_external(command: EngineCommand | str, marker: str | None = None, *, timeout_s: float = 600.0,
                  nbytes: int = 0, binary: tuple[str, str, tuple[Any, ...]] | None = None,
                  device_info: Mapping[str, Any] | None = None, model: ReadTarget | None = None) -> Outcome:
    """Spawn the engine, stop the clock at its end marker, kill its process group.

    ``command`` is an :class:`EngineCommand` or a command line (an argument list in shell quoting,
    with ``marker``). ``binary`` is :func:`~workbench.measure.engine.command.identify`'s result,
    recorded with the run. The load window is start marker → end marker when a start marker is
    given (spawn → end marker is then the run's wall), else spawn → end marker.

    ``model`` is what the engine is said to load: its process tree is sampled while it runs
    (:mod:`~workbench.measure.engine.evidence`), and the run carries the model's bytes (so a GB/s)
    only when that shows it read them. After the marker the engine has :data:`EXIT_GRACE_S` to exit on
    its own — its exit status is recorded, and one other than 0 (or ``command.expect_exit``) fails the
    run — before its whole tree is killed.
    """
    if isinstance(command, str):
        command = EngineCommand(command, marker or "")
    watch = _Watch(compile_patterns(command), 0.0)
    sampler = TreeSampler.at_spawn(model) if model is not None else None
    master, slave = pty.openpty()
    began = time.monotonic()  # the timeout covers start-up too: a program that blocks in exec is cut
    try:
        proc, status = reaper.spawn([command.cmd] if command.shell else command.argv(), shell=command.shell,
                                    stdout=slave, stderr=slave)
    except OSError as exc:
        os.close(master)
        if sampler is not None:
            sampler.close()
        return Outcome(pid=None, load_s=None, wall_s=None, error=f"cannot start {command.cmd!r}: {exc}")
    finally:
        os.close(slave)  # the engine holds its copy; EOF (EIO) arrives when every writer is gone
    waited, judged, evidence = 0.0, 0.0, None
    try:
        started = reaper.read_started(status, began + timeout_s)
        if not isinstance(started, tuple):
            return _not_started(command, proc, started, timeout_s, began)
        watch.t0 = started[1]  # the engine's fork: the reaper's own start-up is not in the window
        if sampler is not None:
            sampler.root = started[0]  # the engine's tree (the reaper reads nothing of the model)
        hit = read_until_marker(master, watch, watch.t0 + timeout_s, sampler)
        if hit:
            judging = time.monotonic()
            started_prior = None if watch.start_at is None else \
                watch.start_prior_at if watch.start_prior_at is not None else watch.t0
            evidence = sampler.finish(watch.start_at if watch.start_at is not None else watch.t0,
                                      watch.end_at, watch.prior_at, started_prior) if sampler is not None else None
            judged = time.monotonic() - judging  # the engine waited on the workbench: not its wall
            exited, waited = _after_marker(master, watch, proc)
        else:
            exited = _exit_code(proc, watch.t0 + timeout_s)
    finally:
        reaper.stop(proc)  # the engine and everything it started, in its group or not
        gone_at = time.monotonic()
        os.close(master)
        if sampler is not None:
            sampler.close()  # its event record's perf events: ~10 ms each to close, after the engine is gone
    gone_s = gone_at - watch.t0 - waited - judged  # the grace it kept running through is not its wall
    engine = started[0]
    ended = "exited" if exited is not None else "killed at the marker" if hit else "killed at the timeout"
    report = _report(command, engine, watch, exited, binary, device_info, ended, evidence)
    error = _failure(command, watch, hit, exited, timeout_s)
    if error is not None:
        return Outcome(pid=engine, load_s=None, wall_s=gone_s, bytes=0, error=error[-2000:], report=report)
    facts = (evidence.describe(),) if evidence is not None else ()
    read = nbytes if evidence is not None and evidence.ok else 0
    return Outcome(pid=engine, load_s=_window(watch), wall_s=gone_s if watch.start_at is None else
                   watch.end_at - watch.t0, bytes=read, engaged=facts, phases=sum_phases(watch.phases),
                   report=report)


def _after_marker(fd: int, watch: _Watch, proc: subprocess.Popen) -> tuple[int | None, float]:
    """Read on for up to :data:`EXIT_GRACE_S` after the marker: the engine's own exit status if its
    tree ends by then (None: still running, to be killed), and how long it was waited for while running."""
    t0 = time.monotonic()
    read_after_marker(fd, watch.tail, EXIT_GRACE_S, LINE_CHARS)
    code = _exit_code(proc, t0 + EXIT_GRACE_S)
    return code, (time.monotonic() - t0 if code is None else 0.0)


def _not_started(command: EngineCommand, proc: subprocess.Popen, why: str | None, timeout_s: float,
                 began: float) -> Outcome:
    """The outcome of an engine that could not be started, or not within the timeout."""
    if why is None:
        why = f"timed out after {timeout_s:g} s before the engine started (a program that blocks in exec?)"
    return Outcome(pid=proc.pid, load_s=None, wall_s=time.monotonic() - began,
                   error=f"cannot start {command.cmd!r}: {why}")


def _window(watch: _Watch) -> float:
    """Start marker → end marker when a start marker was asked for (and seen), else spawn → end marker."""
    assert watch.end_at is not None
    return watch.end_at - (watch.start_at if watch.start_at is not None else watch.t0)


def _failure(command: EngineCommand, watch: _Watch, hit: bool, exited: int | None, timeout_s: float) -> str | None:
    """Why the run has no load time, or None when it has one."""
    last = " | ".join(watch.tail) or "(no output)"
    expected = 0 if command.expect_exit is None else command.expect_exit
    if hit and exited is not None and exited != expected:
        accept = f"--expect-exit {exited} accepts it" if command.expect_exit is None else \
            f"--expect-exit {command.expect_exit} was expected"
        return (f"exited with code {exited} after the marker /{command.marker}/ (a failed run; {accept}); "
                f"last output: {last}")
    if not hit:
        if exited is None:
            return (f"timed out: no output line matched /{command.marker}/ within {timeout_s:g} s; "
                    f"last output: {last}")
        return f"exited with code {exited} before any line matched /{command.marker}/; last output: {last}"
    if command.start_marker and watch.start_at is None:
        return (f"the end marker /{command.marker}/ came before any line matched the start marker "
                f"/{command.start_marker}/ (end line: {watch.end_line}); last output: {last}")
    if command.start_marker and watch.start_at == watch.end_at:
        # both lines came in one read of the terminal: the window is shorter than this side can time
        return (f"the start marker /{command.start_marker}/ and the end marker /{command.marker}/ arrived "
                "in one read, so the window between them cannot be timed from outside; use markers further "
                "apart, or the engine's own phase lines (--phase)")
    return None


def _report(command: EngineCommand, pid: int | None, watch: _Watch, exited: int | None,
            binary: tuple[str, str, tuple[Any, ...]] | None, device_info: Mapping[str, Any] | None,
            ended: str | None = None, evidence: ReadEvidence | None = None) -> WorkerReport:
    path, digest, files = binary if binary is not None else (None, None, ())
    at = (lambda t: None if t is None else t - watch.t0)
    run = ExternalRun(
        cmd=command.cmd, marker=command.marker, returncode=exited, output_tail=tuple(watch.tail),
        marker_line=watch.end_line, argv=() if command.shell else tuple(command.argv()), shell=command.shell,
        start_marker=command.start_marker, start_line=watch.start_line, start_s=at(watch.start_at),
        marker_s=at(watch.end_at), phases=tuple(watch.phases), binary_path=path, binary_hash=digest,
        binary_files=tuple(files), notes=tuple(watch.notes[:20]), ended=ended,
        expect_exit=command.expect_exit, evidence=evidence,
    )
    return WorkerReport(pid=pid, device_info=dict(device_info or {"backend": "external"}), external=run)


def _exit_code(proc: subprocess.Popen, deadline: float) -> int | None:
    """The command's own exit code once its output ended; None if it is still running at the deadline."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def file_nbytes(path: str) -> int:
    """Tensor bytes when ``path`` is a model the workbench reads (a file or a set: every file's), else
    the file's size."""
    from workbench.io.modelcache import model_files

    model = model_files(path, any_file=True)
    return model.index.nbytes if model.index is not None else model.data_bytes


class _Engines:
    """The run function of an engine comparison: one fresh engine process per call, its build hashed
    first and compared with the attempt's first run, so two builds never mix in one attempt."""

    def __init__(self, commands: Mapping[int, EngineCommand], files: Mapping[int, list[tuple[str, str]]],
                 model: ReadTarget, timeout_s: float, device: str):
        self.commands, self.files, self.model, self.timeout_s = commands, files, model, timeout_s
        self.nbytes = model.nbytes
        name, _, ordinal = device.partition(":")
        self.device_info = {"backend": name, "ordinal": int(ordinal or 0), "engine": "external"}
        self.first: dict[int, tuple[str, str, tuple[Any, ...]]] = {}

    def __call__(self, config: RunConfig) -> Outcome:
        key = id(config)
        command = self.commands[key]
        began = time.monotonic()
        try:  # the run's timeout covers hashing the build too: a file that blocks cannot hang the run
            build = within(self.timeout_s, lambda: identify(self.files[key]), "--cmd", command.cmd,
                           "hashing the engine's files")
        except (OSError, FormatError, ParamError) as exc:
            return Outcome(pid=None, load_s=None, wall_s=None, error=f"cannot hash the engine's files: {exc}")
        left = max(0.001, self.timeout_s - (time.monotonic() - began))
        first = self.first.setdefault(key, build)
        if build[1] != first[1]:
            error = (f"BINARY CHANGED within the attempt: {build[0]} is {build[1]} now, {first[1]} at its "
                     "first run — two builds in one attempt; not run (rerun once the build is stable)")
            report = _report(command, None, _Watch(compile_patterns(command), 0.0), None, build, self.device_info)
            return Outcome(pid=None, load_s=None, wall_s=None, error=error, report=report)
        return time_external(command, timeout_s=left, nbytes=self.nbytes, binary=build,
                             device_info=self.device_info, model=self.model)


def measure_engines(commands: Sequence[EngineCommand], file: str, *, runs: int = 5, cache: str = "cold",
                    order: str = DEFAULT_ORDER, seed: int = 0, timeout_s: float = 600.0, device: str = "host",
                    baseline: str | None = None, **options: Any) -> list[AttemptResult]:
    """Time each engine command ``runs`` times, interleaved, like strategies: one attempt per command
    (``kind='external'``, its build's files hashed), the cache state set and checked before every run,
    the device lock held, every run in the ledger, verdicts against the first command (or ``baseline``).

    ``file`` is the model the engines load: a file, or a directory / index file / shard of a set, whose
    every file has its cache state set and checked before each run. ``device`` names the lock and the
    device recorded with the attempts (the one the engines load onto); further keyword arguments (``ledger``, ``campaign``, ``hypothesis``, ``progress``,
    ``lock_dir``, ``min_effect``) go to the runner. Bad commands, patterns or files fail here in one line, before
    anything is recorded.
    """
    from workbench.measure.run.runner import measure_with

    if not commands:
        raise WorkbenchError("nothing to measure: no engine command given")
    checked = [check_command(c, timeout_s) for c in commands]
    if not os.path.exists(file):
        raise WorkbenchError(f"{file}: no such file or directory (the model the command loads)")
    try:  # a directory, index file or shard: the set; a file the workbench cannot index: that file
        nbytes = file_nbytes(file)
    except (OSError, WorkbenchError) as exc:
        raise WorkbenchError(f"the model the command loads (--file): {exc}") from None
    labels = default_labels(commands)
    configs = [RunConfig(file=file, strategy="external", params=c.params(), device=device, label=label)
               for c, label in zip(commands, labels)]
    engines = _Engines({id(cf): c for cf, c in zip(configs, commands)},
                       {id(cf): files for cf, (_, files) in zip(configs, checked)},
                       ReadTarget.of(file, nbytes), timeout_s, device)
    return measure_with(engines, configs, runs=runs, cache=cache, order=order, seed=seed, baseline=baseline,
                        **options)


def measure_external(cmd: str, marker: str, file: str, *, runs: int = 5, cache: str = "cold",
                     timeout_s: float = 600.0, device: str = "host", label: str = "",
                     baseline: str | None = None, start_marker: str | None = None,
                     phases: Sequence[str] = (), shell: bool = False, binary: str | None = None,
                     expect_exit: int | None = None, **options: Any) -> AttemptResult:
    """One engine command: :func:`measure_engines` with a single :class:`EngineCommand`."""
    command = EngineCommand(cmd, marker, start_marker=start_marker, phases=tuple(phases), shell=shell,
                            binary=binary, label=label, expect_exit=expect_exit)
    return measure_engines([command], file, runs=runs, cache=cache, timeout_s=timeout_s, device=device,
                           baseline=baseline, **options)[0]


__all__ = ["MAX_LINE", "EngineCommand", "LineSplitter", "file_nbytes", "measure_engines", "measure_external", "sum_phases",
           "time_external"]
