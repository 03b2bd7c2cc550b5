"""Every error the workbench raises on purpose, in one place.

The CLI turns a :class:`WorkbenchError` into one line naming the thing and the problem, and exit code 2.
Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations


class WorkbenchError(Exception):
    """Root of the workbench's own errors; ``str(err)`` is the one line the CLI prints."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback (a notebook cell, a papermill run): the same one
        line the CLI prints. A bug (any other exception) keeps its full traceback."""
        return [f"workbench: error: {self}"]


class FormatError(WorkbenchError):
    """A model file that cannot be indexed: names the file, the field and what is wrong.

    Field and detail quote names from the file, which may hold newlines, escape sequences or lone
    surrogates; they are escaped so the message stays one printable line.
    """

    def __init__(self, path: object, field: str, detail: str):
        self.path, self.field, self.detail = str(path), printable(field), printable(detail)
        super().__init__(f"{printable(self.path)}: {self.field}: {self.detail}")


def printable(text: str) -> str:
    """``text`` with every unprintable character (controls, lone surrogates …) backslash-escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class BackendUnavailable(WorkbenchError):
    """A device backend that cannot be used here, with how to get it."""

    def __init__(self, name: str, reason: str, hint: str = ""):
        self.name, self.reason, self.hint = name, reason, hint
        tail = f" ({hint})" if hint and hint not in reason else ""
        super().__init__(f"device backend '{name}' unavailable: {reason}{tail}")


class StrategyUnavailable(WorkbenchError):
    """A registered strategy that cannot run here (missing module, unsupported kernel feature)."""

    def __init__(self, name: str, reason: str, hint: str = ""):
        self.name, self.reason, self.hint = name, reason, hint
        tail = f" ({hint})" if hint else ""
        super().__init__(f"strategy '{name}' unavailable: {reason}{tail}")


class UnknownName(WorkbenchError):
    """A name that no registry knows (strategy, device, format)."""

    def __init__(self, kind: str, name: str, known: list[str]):
        self.kind, self.name, self.known = kind, name, list(known)
        super().__init__(f"unknown {kind} '{name}'; known: {', '.join(sorted(known)) or 'none'}")


class ParamError(WorkbenchError):
    """A strategy or command parameter that does not parse or is out of range."""

    def __init__(self, owner: str, param: str, detail: str):
        self.owner, self.param, self.detail = owner, param, detail
        super().__init__(f"{owner}: parameter '{param}': {detail}")


class CacheStateError(WorkbenchError):
    """The page-cache state asked for ('cold' / 'warm') cannot be reached or was not reached."""

    def __init__(self, path: object, wanted: str, detail: str, resident: float | None = None):
        self.path, self.wanted, self.detail, self.resident = str(path), wanted, detail, resident
        got = "" if resident is None else f" (resident {resident:.1%})"
        super().__init__(f"{self.path}: cannot make the page cache {wanted}: {detail}{got}")


class VerificationError(WorkbenchError):
    """Bytes read back from the device differ from the file's bytes."""

    def __init__(self, path: object, tensor: str, detail: str):
        self.path, self.tensor, self.detail = str(path), tensor, detail
        super().__init__(f"{self.path}: tensor '{tensor}' differs on the device: {detail}")


class WorkerFailed(WorkbenchError):
    """A measurement worker process exited non-zero, was killed, timed out or printed no result.

    ``str(err)`` (``detail``) is what the runner records as that run's error: a failed run is a
    result, so the runner catches this and goes on. ``pid`` and ``wall_s`` say which process it was
    and how long it lived, as the parent saw it.
    """

    def __init__(self, cmd: list[str] | str, returncode: int | None, stderr: str, detail: str = "", *,
                 pid: int | None = None, wall_s: float | None = None):
        self.cmd = cmd if isinstance(cmd, str) else " ".join(cmd)
        self.returncode, self.stderr, self.pid, self.wall_s = returncode, stderr, pid, wall_s
        if not detail:
            last = stderr.strip().splitlines()[-1] if stderr.strip() else "no stderr"
            detail = f"worker {'timed out' if returncode is None else f'exit {returncode}'}: {last}"
        self.detail = detail
        super().__init__(detail)


class LedgerError(WorkbenchError):
    """The attempt ledger cannot be opened, read or written as asked."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: {detail}")


class UnrecordedResults(LedgerError):
    """A ledger write failed mid-measurement (full disk, locked past the busy timeout, read-only file
    system). The measurement went on in memory: ``results`` holds every attempt as measured and ``dump``
    the JSON file they were saved to (None when no file could be written anywhere)."""

    def __init__(self, path: object, cause: str, results: list, dump: str | None, missing: int, total: int):
        self.cause, self.results, self.dump, self.missing = cause, list(results), dump, missing
        where = f"saved to {dump}" if dump else "printed as JSON (no file could be written)"
        super().__init__(path, f"a ledger write failed mid-measurement ({cause}); {missing} of {total} "
                               f"runs not recorded, every result {where}")


class UnrecordedDumpError(WorkbenchError):
    """A file given to ``workbench ledger import-unrecorded`` that is not an unrecorded-results dump
    (not JSON, a key missing, a value of the wrong type): names the file and what is wrong."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: not a workbench unrecorded-results dump: {detail}")


class OutputError(WorkbenchError):
    """An output path a command refuses to write: its own input, or a ledger or model not asked to be
    replaced."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: {detail}")


class LockError(WorkbenchError):
    """A device lock directory or file that is unsafe to use (someone else's, a link, not a file)."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: {detail}; set WORKBENCH_LOCK_DIR to a directory of your own to go on")


class SweepError(WorkbenchError):
    """A sweep file that is malformed, or a sweep that cannot start."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: {detail}")


class DeviceError(WorkbenchError):
    """A GPU runtime call that failed: names the device, the call and the runtime's error."""

    def __init__(self, device: str, call: str, code: str, detail: str = ""):
        self.device, self.call, self.code, self.detail = device, call, code, detail
        tail = f" ({detail})" if detail else ""
        super().__init__(f"{device}: {call} failed: {code}{tail}")


class ThreadsStuck(WorkbenchError):
    """Threads of a load still running a bounded time after they were told to stop: the load fails
    instead of hanging. ``where`` says, per thread, where it was; ``cause`` is what stopped the load."""

    def __init__(self, owner: str, seconds: float, where: list[str], cause: BaseException | None = None):
        self.owner, self.seconds, self.where, self.cause = owner, seconds, where, cause
        why = f" after {type(cause).__name__}: {cause}" if cause is not None else ""
        super().__init__(f"{owner}: {len(where)} thread(s) still running {seconds:g} s after being told to stop"
                         f"{why} ({'; '.join(where)}); the load is abandoned, not hung")


class TraceError(WorkbenchError):
    """A routing trace that cannot be used: names the file (or "synthetic"), where, and what is wrong."""

    def __init__(self, path: object, detail: str):
        self.path, self.detail = str(path), detail
        super().__init__(f"{self.path}: {detail}")


class BaselineMismatch(WorkbenchError):
    """A ``--baseline`` attempt of another model, cache state or device than the measurement held
    against it, refused before anything is recorded: ``what`` says what differs, ``flag`` how to ask
    for the ratio anyway."""

    def __init__(self, what: str, flag: str):
        self.what, self.flag = what, flag
        super().__init__(f"{printable(what)}: refused (a ratio across them compares two different things); "
                         f"measure a baseline of this model, state and device, or pass {flag} to compare "
                         "anyway, marked ACROSS wherever the ratio is shown")


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C (the CLI installs the handler): every ``finally`` and
    ``except BaseException`` that closes attempts and kills workers runs. ``signum`` is the signal."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by signal {signum}")


class MeasurementInterrupted(KeyboardInterrupt):
    """Ctrl-C during a measurement, after the runner closed the attempts it had opened as failed.

    A ``KeyboardInterrupt`` on purpose, not a :class:`WorkbenchError`: code that catches ``Exception``
    must still stop. It carries what was kept so the CLI can say so: ``done`` of ``total`` runs were
    recorded, in ``attempt_ids`` (now failed, reason ``interrupted``).
    """

    def __init__(self, done: int, total: int, attempt_ids: list[str], unit: str = "runs"):
        self.done, self.total, self.attempt_ids = done, total, list(attempt_ids)
        ids = ", ".join(i[:8] for i in self.attempt_ids) or "no attempt"
        super().__init__(f"interrupted: {done}/{total} {unit} recorded in {ids} (marked failed: interrupted)")
