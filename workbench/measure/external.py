"""External engine mode: time other programs' loads, from spawn (or a start-marker line) to an end-marker
line, then kill them; compare several engine commands interleaved like strategies.

The command runs as an argument list (no shell unless asked) in its own session (process group), with
stdout and stderr on a pseudo-terminal, so a C or Python program line-buffers its output as it would in
a terminal: with a plain pipe, stdio's block buffering would hold the marker line back and silently add
time to the measurement. Every line (split on ``\\n`` or ``\\r``) up to the end marker is read for the
engine's own phase lines; at the end marker the clock stops and the whole process group is killed, so
prompt evaluation and generation are never timed.
"""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from workbench.errors import FormatError, WorkbenchError
from workbench.measure.attempt import AttemptResult
from workbench.measure.engine_command import (
    EngineCommand, Patterns, check_command, compile_patterns, default_labels, identify,
)
from workbench.measure.order import DEFAULT_ORDER
from workbench.measure.spawn import Outcome, kill_group
from workbench.records import EnginePhase, ExternalRun, RunConfig, WorkerReport

TAIL_LINES = 20
LINE_CHARS = 300


def compile_marker(marker: str) -> re.Pattern[str]:
    """The marker as a regex; a bad pattern is a ParamError naming it."""
    from workbench.measure.engine_command import compile_pattern

    return compile_pattern(marker, "--marker")


@dataclass
class _Watch:
    """What the output said up to the end marker: the start marker, phase lines, the last lines."""

    patterns: Patterns
    t0: float
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    phases: list[EnginePhase] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    start_at: float | None = None
    start_line: str | None = None
    end_at: float | None = None
    end_line: str | None = None

    def feed(self, raw: bytes, at: float) -> bool:
        """Read one line that arrived at ``at``; True when it is the end marker."""
        text = raw.decode(errors="replace").strip()
        if text:
            self.tail.append(text[:LINE_CHARS])
        self._read_phases(text, at)
        if self.patterns.start is not None and self.start_at is None and self.patterns.start.search(text):
            self.start_at, self.start_line = at, text[:LINE_CHARS]
        if self.patterns.marker.search(text):
            self.end_at, self.end_line = at, text[:LINE_CHARS]
            return True
        return False

    def _read_phases(self, text: str, at: float) -> None:
        for pattern in self.patterns.phases:
            for match in pattern.finditer(text):
                groups = match.groupdict()
                name, unit = (groups.get("name") or "").strip(), "ms" if groups.get("ms") is not None else "s"
                try:
                    seconds = float(groups[unit]) / (1000.0 if unit == "ms" else 1.0)
                except (TypeError, ValueError):
                    seconds = None
                if not name or seconds is None or seconds != seconds or seconds < 0:
                    self.notes.append(f"phase line not read (name {name!r}, {unit} {groups.get(unit)!r}): "
                                      f"{text[:120]}")
                    continue
                self.phases.append(EnginePhase(name, seconds, at - self.t0, text[:LINE_CHARS]))


def sum_phases(phases: Sequence[EnginePhase]) -> dict[str, float]:
    """Seconds per phase name, a name printed several times (once per layer) summed."""
    out: dict[str, float] = {}
    for phase in phases:
        out[phase.name] = out.get(phase.name, 0.0) + phase.seconds
    return out


def time_external(command: EngineCommand | str, marker: str | None = None, *, timeout_s: float = 600.0,
                  nbytes: int = 0, binary: tuple[str, str, tuple[Any, ...]] | None = None,
                  device_info: Mapping[str, Any] | None = None) -> Outcome:
    """Spawn the engine, stop the clock at its end marker, kill its process group.

    ``command`` is an :class:`EngineCommand` or a command line (an argument list in shell quoting,
    with ``marker``). ``binary`` is :func:`~workbench.measure.engine_command.identify`'s result,
    recorded with the run. The load window is start marker → end marker when a start marker is
    given (spawn → end marker is then the run's wall), else spawn → end marker.
    """
    if isinstance(command, str):
        command = EngineCommand(command, marker or "")
    watch = _Watch(compile_patterns(command), 0.0)
    master, slave = pty.openpty()
    watch.t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(command.cmd if command.shell else command.argv(), shell=command.shell,
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True,
                                close_fds=True)
    except OSError as exc:
        os.close(master)
        return Outcome(pid=None, load_s=None, wall_s=None, error=f"cannot start {command.cmd!r}: {exc}")
    finally:
        os.close(slave)  # the child holds its copy; EOF (EIO) arrives when every writer is gone
    try:
        hit = _read_until_marker(master, watch, watch.t0 + timeout_s)
        exited = None if hit else _exit_code(proc, watch.t0 + timeout_s)
    finally:
        kill_group(proc)
        os.close(master)
    killed_s = time.perf_counter() - watch.t0
    report = _report(command, proc.pid, watch, exited, binary, device_info)
    error = _failure(command, watch, hit, exited, timeout_s)
    if error is not None:
        return Outcome(pid=proc.pid, load_s=None, wall_s=killed_s, bytes=nbytes, error=error[-2000:], report=report)
    return Outcome(pid=proc.pid, load_s=_window(watch), wall_s=killed_s if watch.start_at is None else
                   watch.end_at - watch.t0, bytes=nbytes, phases=sum_phases(watch.phases), report=report)


def _window(watch: _Watch) -> float:
    """Start marker → end marker when a start marker was asked for (and seen), else spawn → end marker."""
    assert watch.end_at is not None
    return watch.end_at - (watch.start_at if watch.start_at is not None else watch.t0)


def _failure(command: EngineCommand, watch: _Watch, hit: bool, exited: int | None, timeout_s: float) -> str | None:
    """Why the run has no load time, or None when it has one."""
    last = " | ".join(watch.tail) or "(no output)"
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
            binary: tuple[str, str, tuple[Any, ...]] | None, device_info: Mapping[str, Any] | None) -> WorkerReport:
    path, digest, files = binary if binary is not None else (None, None, ())
    at = (lambda t: None if t is None else t - watch.t0)
    run = ExternalRun(
        cmd=command.cmd, marker=command.marker, returncode=exited, output_tail=tuple(watch.tail),
        marker_line=watch.end_line, argv=() if command.shell else tuple(command.argv()), shell=command.shell,
        start_marker=command.start_marker, start_line=watch.start_line, start_s=at(watch.start_at),
        marker_s=at(watch.end_at), phases=tuple(watch.phases), binary_path=path, binary_hash=digest,
        binary_files=tuple(files), notes=tuple(watch.notes[:20]),
    )
    return WorkerReport(pid=pid, device_info=dict(device_info or {"backend": "external"}), external=run)


def _read_until_marker(fd: int, watch: _Watch, deadline: float) -> bool:
    """Feed lines to ``watch`` until the end marker (True), the output ends or the deadline passes."""
    pending = b""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's last writer closed it
            chunk = b""
        at = time.perf_counter()
        lines = re.split(rb"[\r\n]", pending + chunk)
        pending = lines.pop() if chunk else b""
        for line in lines:
            if watch.feed(line, at):
                return True
        if not chunk:
            return False


def _exit_code(proc: subprocess.Popen, deadline: float) -> int | None:
    """The command's own exit code once its output ended; None if it is still running at the deadline."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
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
                 nbytes: int, timeout_s: float, device: str):
        self.commands, self.files, self.nbytes, self.timeout_s = commands, files, nbytes, timeout_s
        name, _, ordinal = device.partition(":")
        self.device_info = {"backend": name, "ordinal": int(ordinal or 0), "engine": "external"}
        self.first: dict[int, tuple[str, str, tuple[Any, ...]]] = {}

    def __call__(self, config: RunConfig) -> Outcome:
        key = id(config)
        command = self.commands[key]
        try:
            build = identify(self.files[key])
        except (OSError, FormatError) as exc:
            return Outcome(pid=None, load_s=None, wall_s=None, error=f"cannot hash the engine's files: {exc}")
        first = self.first.setdefault(key, build)
        if build[1] != first[1]:
            error = (f"BINARY CHANGED within the attempt: {build[0]} is {build[1]} now, {first[1]} at its "
                     "first run — two builds in one attempt; not run (rerun once the build is stable)")
            report = _report(command, None, _Watch(compile_patterns(command), 0.0), None, build, self.device_info)
            return Outcome(pid=None, load_s=None, wall_s=None, error=error, report=report)
        return time_external(command, timeout_s=self.timeout_s, nbytes=self.nbytes, binary=build,
                             device_info=self.device_info)


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
    from workbench.measure.runner import measure_with

    if not commands:
        raise WorkbenchError("nothing to measure: no engine command given")
    checked = [check_command(c) for c in commands]
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
                       {id(cf): files for cf, (_, files) in zip(configs, checked)}, nbytes, timeout_s, device)
    return measure_with(engines, configs, runs=runs, cache=cache, order=order, seed=seed, baseline=baseline,
                        **options)


def measure_external(cmd: str, marker: str, file: str, *, runs: int = 5, cache: str = "cold",
                     timeout_s: float = 600.0, device: str = "host", label: str = "",
                     baseline: str | None = None, start_marker: str | None = None,
                     phases: Sequence[str] = (), shell: bool = False, binary: str | None = None,
                     **options: Any) -> AttemptResult:
    """One engine command: :func:`measure_engines` with a single :class:`EngineCommand`."""
    command = EngineCommand(cmd, marker, start_marker=start_marker, phases=tuple(phases), shell=shell,
                            binary=binary, label=label)
    return measure_engines([command], file, runs=runs, cache=cache, timeout_s=timeout_s, device=device,
                           baseline=baseline, **options)[0]


__all__ = ["EngineCommand", "file_nbytes", "measure_engines", "measure_external", "sum_phases",
           "time_external"]
