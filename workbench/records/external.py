"""What one run of an external engine reported: its command, markers, its own phase lines, its binary.

The ledger keeps this under ``runs.result``; the keys of the first version (``cmd``, ``marker``,
``returncode``, ``output_tail``, ``marker_line``) are written as before, and each later field only
when it is set, so older rows read back unchanged and newer rows stay small.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class EnginePhase:
    """One of the engine's own phase lines (``weight sweep: 2712 ms``), read out of its output.

    ``seconds`` is what the engine said; ``at_s`` is when the line arrived, seconds after spawn."""

    name: str
    seconds: float
    at_s: float
    line: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "seconds": self.seconds, "at_s": self.at_s, "line": self.line}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnginePhase:
        return cls(str(data["name"]), float(data["seconds"]), float(data.get("at_s", 0.0)),
                   str(data.get("line", "")))


@dataclass(frozen=True)
class BinaryFile:
    """One file that identifies an engine build: its executable, or an interpreter and its script.

    ``role`` says which: ``executable``, ``interpreter``, ``script`` or ``given`` (named by ``--binary``)."""

    role: str
    path: str
    hash: str
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "path": self.path, "hash": self.hash, "size": self.size}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BinaryFile:
        return cls(str(data["role"]), str(data["path"]), str(data["hash"]), int(data.get("size", 0)))


GRADES = ("bytes-read", "mapping-touched", "mapped-only", "opened-only", "none")
CREDITED = ("bytes-read", "mapping-touched")  # the grades that show a GB/s


@dataclass(frozen=True)
class ReadEvidence:
    """What shows that an external engine read the model inside its load window (or that nothing does).

    Only what is attributable to the model's files counts (see :mod:`workbench.measure.engine.evidence`).
    ``grade`` names it (:data:`GRADES`): ``bytes-read`` (read calls copied the model's bytes into the
    engine's memory), ``mapping-touched`` (the engine's own accesses faulted its mappings of them in),
    ``mapped-only`` (mapped, or populated, never shown touched), ``opened-only`` (opened, or read in
    part, or moved by sendfile/splice), ``none``; only the first two show a GB/s. ``source`` says
    what recorded it: ``events`` (the kernel's event record of the whole window) or ``samples: WHY``
    (the fallback where events cannot be recorded). From the event record: ``read_call_bytes``,
    ``touched_bytes``, ``spliced_bytes``, ``mapped_bytes`` per kind, ``seen_bytes`` the files' pages
    read or touched, ``events_lost`` records the kernel dropped, ``opens`` opens of the files seen.
    From samples (older rows, and the fallback): ``fd_bytes`` how far the tree's descriptors read
    (bounded by ``rchar``), ``mapped_bytes`` the most of their pages its mappings had resident.
    ``resident_before``/``resident_after``: the model's bytes in the page cache at spawn and at the
    marker; ``rchar``/``read_bytes``: growth of the tree's ``/proc/PID/io`` counters (any file: a bound,
    never evidence). ``basis`` says what shows the read ('' = nothing does: time only)."""

    model: str  # the model's file name, as messages name it
    model_bytes: int  # the bytes one load of the model reads (its tensors)
    rchar: int | None = None
    read_bytes: int | None = None
    mapped_bytes: int | None = None
    resident_before: int | None = None
    resident_after: int | None = None
    processes: int = 0  # processes of the engine's tree seen
    samples: int = 0
    unreadable: str = ""  # why /proc/PID/io or smaps could not be read ('' when they could)
    basis: str = ""
    fd_bytes: int | None = None  # None: recorded before descriptors were read
    seen_bytes: int | None = None
    files: int = 0
    files_held: int = 0
    sampling_s: float | None = None
    grade: str = ""  # '' : recorded before grades (shown as `sampled` or `none`)
    source: str = ""
    read_call_bytes: int | None = None
    touched_bytes: int | None = None
    spliced_bytes: int | None = None
    events_lost: int = 0
    opens: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.basis)

    @property
    def level(self) -> str:
        """The grade, or for a row recorded before grades: ``sampled`` (it had evidence) or ``none``."""
        return self.grade or ("sampled" if self.ok else "none")

    def describe(self) -> str:
        """``engine read m.gguf (bytes-read): …`` or ``no evidence the engine read m.gguf (mapped-only: …):
        time only``."""
        if self.ok:
            return f"engine read {self.model} ({self.level}): {self.basis}"
        return f"no evidence the engine read {self.model} ({self.level}: {self.best()}): time only"

    def best(self) -> str:
        """The most any measure shows, against the model's bytes (for a run without evidence)."""
        if self.source == "events":
            return self._best_events()
        if self.unreadable and self.rchar is None and self.resident_after is None:
            return self.unreadable
        if self.seen_bytes is None:  # a row recorded before evidence was per file
            seen = {"read calls": self.rchar, "storage reads": self.read_bytes, "mapped": self.mapped_bytes,
                    "page cache gain": _gain(self.resident_before, self.resident_after)}
            name, most = max(((k, v) for k, v in seen.items() if v is not None), key=lambda kv: kv[1],
                             default=("nothing measured", 0))
            return f"at most {_mib(most)} of its {_mib(self.model_bytes)} ({name})"
        parts = {"mapped": self.mapped_bytes, "descriptors": self.fd_bytes,
                 "page cache gain": _gain(self.resident_before, self.resident_after)}
        shown = ", ".join(f"{k} {_mib(v)}" for k, v in parts.items() if v)
        held = (f"; it held {self.files_held}/{self.files} of its files" if self.files_held else
                f"; it never opened or mapped {'them' if self.files > 1 else 'it'}")
        return f"at most {_mib(self.seen_bytes)} of its {_mib(self.model_bytes)}" + \
            (f" ({shown})" if shown else "") + held

    def _best_events(self) -> str:
        parts = {"read by read calls": self.read_call_bytes, "touched through mappings": self.touched_bytes,
                 "mapped, never touched": max(0, (self.mapped_bytes or 0) - (self.touched_bytes or 0)),
                 "moved by sendfile/splice, never into its memory": self.spliced_bytes}
        shown = ", ".join(f"{_mib(v)} {k}" for k, v in parts.items() if v)
        lost = f"; {self.events_lost} event records lost" if self.events_lost else ""
        them = "them" if self.files > 1 else "it"
        opened = "" if shown else (f"; it opened {them}" if self.opens or self.files_held else
                                   f"; it never opened, read or mapped {them}")
        return f"at most {_mib(self.seen_bytes or 0)} of its {_mib(self.model_bytes)} reached it" + \
            (f" ({shown})" if shown else "") + opened + lost

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReadEvidence:
        ints = ("rchar", "read_bytes", "mapped_bytes", "resident_before", "resident_after", "fd_bytes",
                "seen_bytes", "read_call_bytes", "touched_bytes", "spliced_bytes")
        return cls(model=str(data.get("model", "")), model_bytes=int(data.get("model_bytes") or 0),
                   **{k: None if data.get(k) is None else int(data[k]) for k in ints},
                   processes=int(data.get("processes") or 0), samples=int(data.get("samples") or 0),
                   unreadable=str(data.get("unreadable") or ""), basis=str(data.get("basis") or ""),
                   files=int(data.get("files") or 0), files_held=int(data.get("files_held") or 0),
                   sampling_s=None if data.get("sampling_s") is None else float(data["sampling_s"]),
                   grade=str(data.get("grade") or ""), source=str(data.get("source") or ""),
                   events_lost=int(data.get("events_lost") or 0), opens=int(data.get("opens") or 0))


def _gain(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else max(0, after - before)


def _mib(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


@dataclass(frozen=True)
class ExternalRun:
    """An external engine's run: the command, the markers that framed the clock, what it printed.

    ``start_s`` and ``marker_s`` are seconds after spawn at which the start marker (when one was
    asked for) and the end marker arrived; ``binary_path``/``binary_hash`` identify the build that ran
    (one file, or several combined: see ``binary_files``)."""

    cmd: str
    marker: str
    returncode: int | None  # its own exit code when it exited (before the marker, or soon after); None otherwise
    output_tail: tuple[str, ...] = ()
    marker_line: str | None = None  # the line that matched (None: it never did)
    argv: tuple[str, ...] = ()  # what was executed without a shell; empty when a shell ran ``cmd``
    shell: bool = False
    start_marker: str | None = None
    start_line: str | None = None
    start_s: float | None = None
    marker_s: float | None = None
    phases: tuple[EnginePhase, ...] = ()
    binary_path: str | None = None
    binary_hash: str | None = None
    binary_files: tuple[BinaryFile, ...] = ()
    notes: tuple[str, ...] = ()  # what the reader must know (a phase line whose number did not parse)
    ended: str | None = None  # "exited", "killed at the marker", "killed at the timeout" (None: older rows)
    expect_exit: int | None = None  # the exit status --expect-exit accepted after the marker (None: 0)
    evidence: ReadEvidence | None = None  # what shows the engine read the model in the window

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cmd": self.cmd, "marker": self.marker, "returncode": self.returncode,
                               "output_tail": list(self.output_tail)}
        optional = {
            "marker_line": self.marker_line, "argv": list(self.argv) or None, "shell": self.shell or None,
            "start_marker": self.start_marker, "start_line": self.start_line, "start_s": self.start_s,
            "marker_s": self.marker_s, "phases": [p.to_json() for p in self.phases] or None,
            "binary_path": self.binary_path, "binary_hash": self.binary_hash,
            "binary_files": [b.to_json() for b in self.binary_files] or None, "notes": list(self.notes) or None,
            "ended": self.ended, "expect_exit": self.expect_exit,
            "evidence": None if self.evidence is None else self.evidence.to_json(),
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExternalRun:
        returncode = data.get("returncode")
        return cls(
            cmd=str(data["cmd"]), marker=str(data.get("marker", "")),
            returncode=None if returncode is None else int(returncode),
            output_tail=tuple(map(str, data.get("output_tail") or ())),
            marker_line=_opt_str(data.get("marker_line")), argv=tuple(map(str, data.get("argv") or ())),
            shell=bool(data.get("shell", False)), start_marker=_opt_str(data.get("start_marker")),
            start_line=_opt_str(data.get("start_line")), start_s=_opt_float(data.get("start_s")),
            marker_s=_opt_float(data.get("marker_s")),
            phases=tuple(EnginePhase.from_json(p) for p in data.get("phases") or ()),
            binary_path=_opt_str(data.get("binary_path")), binary_hash=_opt_str(data.get("binary_hash")),
            binary_files=tuple(BinaryFile.from_json(b) for b in data.get("binary_files") or ()),
            notes=tuple(map(str, data.get("notes") or ())), ended=_opt_str(data.get("ended")),
            expect_exit=None if data.get("expect_exit") is None else int(data["expect_exit"]),
            evidence=None if not data.get("evidence") else ReadEvidence.from_json(data["evidence"]),
        )
