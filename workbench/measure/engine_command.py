"""An external engine's command, checked before anything runs: its argument list, its markers and
phase patterns, and the files that identify the build it runs.

What identifies a build:

- a compiled engine (``./llama-cli …``, ``hipfire-daemon …``): the executable, resolved from the
  command's first word through ``PATH`` like a shell would;
- a script run by an interpreter (``python engine.py``, ``bash run.sh``) or a script with a ``#!``
  line: the interpreter *and* the script, each hashed, the two hashes combined into one — a new
  script or a new interpreter is a new build;
- anything else (``python -m pkg``, code after ``-c``, a shell line whose program cannot be told):
  ``--binary FILE`` names the file that does (the engine's shared library, its main module).

Libraries a script imports (torch, transformers) are not hashed: name the one that matters with
``--binary``.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from typing import Any, Sequence

from workbench.errors import FormatError, ParamError
from workbench.records import BinaryFile

_INTERPRETER = re.compile(r"^(?:(?:python|pypy)[\d.]*|bash|sh|dash|zsh|node|perl|ruby|julia|Rscript)$")
_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})  # python options that take a value
_NO_SCRIPT = frozenset({"-c", "-m", "-e", "-"})  # the program is not in a file after these
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
LABEL_WIDTH = 60


@dataclass(frozen=True)
class EngineCommand:
    """One engine to time: ``cmd`` run as an argument list (or by ``/bin/sh`` when ``shell``), the clock
    stopped at the first output line matching ``marker``; ``start_marker`` starts it (else: spawn);
    ``phases`` are patterns of the engine's own phase lines; ``binary`` overrides what identifies it;
    ``expect_exit`` is the exit status that is no failure when it exits on its own after the marker."""

    cmd: str
    marker: str
    start_marker: str | None = None
    phases: tuple[str, ...] = ()
    shell: bool = False
    binary: str | None = None
    label: str = ""
    expect_exit: int | None = None  # the exit status accepted when it exits after the marker (None: 0)

    def argv(self) -> list[str]:
        """The argument list (shell quoting rules); a quoting error is a one-line ParamError."""
        try:
            words = shlex.split(self.cmd)
        except ValueError as exc:
            raise ParamError("--cmd", self.cmd, f"not a valid argument list ({exc}); "
                             "quote it as a shell would, or pass --shell") from None
        if not words:
            raise ParamError("--cmd", self.cmd, "empty command")
        return words

    def params(self) -> dict[str, Any]:
        """What the attempt records as its parameters (only what was set)."""
        out: dict[str, Any] = {"cmd": self.cmd, "marker": self.marker}
        if self.start_marker:
            out["start_marker"] = self.start_marker
        if self.phases:
            out["phases"] = list(self.phases)
        if self.shell:
            out["shell"] = True
        if self.binary:
            out["binary"] = self.binary
        if self.expect_exit is not None:
            out["expect_exit"] = self.expect_exit
        return out

    def display(self) -> str:
        """The label, else the command with paths shortened to their file names."""
        if self.label:
            return self.label
        try:
            words = [os.path.basename(w) if os.path.isabs(w) else w for w in shlex.split(self.cmd)]
        except ValueError:
            words = [self.cmd]
        text = " ".join(words)
        if len(text) <= LABEL_WIDTH:
            return text
        half = (LABEL_WIDTH - 1) // 2
        return f"{text[:half]}…{text[-half:]}"


@dataclass(frozen=True)
class Patterns:
    """A command's regular expressions, compiled once."""

    marker: re.Pattern[str]
    start: re.Pattern[str] | None
    phases: tuple[re.Pattern[str], ...]


def compile_pattern(text: str, option: str = "--marker") -> re.Pattern[str]:
    """A regular expression, or a ParamError naming the option and the pattern."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ParamError(option, text, f"not a regular expression ({exc})") from None


def compile_patterns(command: EngineCommand) -> Patterns:
    """The marker, start marker and phase patterns; a phase needs groups ``name`` and ``ms`` or ``s``."""
    phases = []
    for text in command.phases:
        pattern = compile_pattern(text, "--phase")
        groups = set(pattern.groupindex)
        if "name" not in groups or len(groups & {"ms", "s"}) != 1:
            raise ParamError("--phase", text, "needs the named groups (?P<name>…) and one of (?P<ms>…) "
                             "or (?P<s>…), e.g. '(?P<name>weight sweep): (?P<ms>[0-9.]+) ms'")
        phases.append(pattern)
    start = compile_pattern(command.start_marker, "--start-marker") if command.start_marker else None
    return Patterns(compile_pattern(command.marker), start, tuple(phases))


def build_files(command: EngineCommand) -> list[tuple[str, str]]:
    """(role, real path) of every file that identifies the build ``command`` runs; see the module doc."""
    if command.binary:
        path = os.path.realpath(os.path.expanduser(command.binary))
        if not os.path.isfile(path):
            raise ParamError("--binary", command.binary, "no such file")
        return [("given", path)]
    words = _program_words(command)
    found = shutil.which(words[0])
    if found is None:
        raise ParamError("--cmd", command.cmd, f"'{words[0]}' is not an executable file or on PATH "
                         "(give its path, or name the engine's file with --binary)")
    exe = os.path.realpath(found)
    interpreter = _shebang_interpreter(exe)
    if interpreter is not None:
        return [("interpreter", interpreter), ("script", exe)]
    if _INTERPRETER.match(os.path.basename(exe)) or _INTERPRETER.match(os.path.basename(words[0])):
        script = _script_argument(words[1:])
        if script is not None:
            return [("interpreter", exe), ("script", os.path.realpath(script))]
    return [("executable", exe)]


def identify(files: Sequence[tuple[str, str]]) -> tuple[str, str, tuple[BinaryFile, ...]]:
    """(path, hash, files) of a build: one file's own hash, or for several an xxh3_128 over their
    hashes in order, so either file changing changes it. Hashes come from the identity cache when a
    file's realpath, size, mtime and inode are unchanged (the model file is hashed the same way)."""
    import xxhash

    from workbench.io.identity import file_identity

    parts = []
    for role, path in files:
        ident = file_identity(path)
        parts.append(BinaryFile(role, ident.path, ident.hash, ident.size))
    if len(parts) == 1:
        return parts[0].path, parts[0].hash, tuple(parts)
    digest = xxhash.xxh3_128("\n".join(p.hash for p in parts).encode()).hexdigest()
    return " + ".join(p.path for p in parts), f"xxh3_128:{digest}", tuple(parts)


def check_command(command: EngineCommand) -> tuple[Patterns, list[tuple[str, str]]]:
    """Everything that can be refused before a run: quoting, patterns, the build's files (and that
    they can be read and hashed)."""
    if not command.shell:
        command.argv()
    patterns = compile_patterns(command)
    files = build_files(command)
    try:
        identify(files)
    except (OSError, FormatError) as exc:
        raise ParamError("--binary" if command.binary else "--cmd", command.cmd,
                         f"cannot hash the engine's files: {exc}") from None
    return patterns, files


def default_labels(commands: Sequence[EngineCommand]) -> list[str]:
    """A label for each command: its own, else what tells it from the others (``--read heap`` against
    ``--read mmap``: the words all commands share at the start and end dropped, an option name kept
    with its value), else its shortened command line; identical ones get ``#k``."""
    words = [_words(c.cmd) for c in commands]
    head = _common_length(words)
    tail = _common_length([w[head:][::-1] for w in words])
    if head and any(w[head - 1].startswith("-") for w in words[:1]):
        head -= 1  # keep the option whose value differs: "--read heap", not "heap"
    distinct = [" ".join(w[head:len(w) - tail]) for w in words]
    useful = len(commands) > 1 and len(set(distinct)) > 1  # identical commands (an A/A) keep their text
    labels = [c.label or (d if useful and d else c.display()) for c, d in zip(commands, distinct)]
    return [f"{label} #{labels[:i].count(label) + 1}" if labels.count(label) > 1 else label
            for i, label in enumerate(labels)]


def _words(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError:
        return [cmd]


def _common_length(lists: Sequence[Sequence[str]]) -> int:
    """How many leading items every list shares (never all of the shortest: something must remain)."""
    shortest = min(len(w) for w in lists) if lists else 0
    n = 0
    while n < shortest - 1 and all(w[n] == lists[0][n] for w in lists):
        n += 1
    return n


def short_hash(value: str | None, width: int = 8) -> str:
    """``xxh3_128:1a2b3c4d…`` → ``1a2b3c4d``; '' for None."""
    return "" if not value else str(value).rpartition(":")[2][:width]


def _program_words(command: EngineCommand) -> list[str]:
    """The program and its arguments; for a shell line, the first simple command after ``VAR=x``."""
    if not command.shell:
        return command.argv()
    try:
        words = shlex.split(command.cmd, comments=True)
    except ValueError:
        words = []
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words or words[0] in ("exec", "env", "cd", "(", "{") or any(c in words[0] for c in ";&|$`<>"):
        raise ParamError("--cmd", command.cmd, "cannot tell which program this shell line runs: "
                         "name the engine's file with --binary")
    return words


def _shebang_interpreter(path: str) -> str | None:
    """The interpreter a ``#!`` line names (``env NAME`` resolved through PATH), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    program = words[0]
    if os.path.basename(program) == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        program = shutil.which(names[0]) if names else None
    return os.path.realpath(program) if program and os.path.isfile(program) else None


def _script_argument(args: Sequence[str]) -> str | None:
    """The script file an interpreter is given (its first non-option argument), or None."""
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _NO_SCRIPT:
            return None
        if arg.startswith("-"):
            skip = arg in _VALUE_OPTIONS
            continue
        return arg if os.path.isfile(arg) else None
    return None
