"""Which files identify the build an engine command runs, and their combined hash.

- a compiled engine (``./llama-cli …``): the executable, resolved from the command's first word through
  ``PATH`` like a shell would;
- a script run by an interpreter (``python engine.py``, ``bash run.sh``) or a script with a ``#!`` line:
  the interpreter *and* the script, each hashed, the two hashes combined into one;
- an interpreter reached through a shell shim (pyenv's and asdf's ``python3``, a ``#!/usr/bin/env
  python3`` that finds such a shim): the shim runs some other program, so the real interpreter is asked
  for its own path (``sys.executable``, ``process.execPath``, ``$^X``) and hashed with the shim and the
  script — the shim alone would keep its hash whatever the script became;
- a ``#!`` line naming a script that is not named like an interpreter (a chain of ``#!`` scripts): what
  the chain runs in the end cannot be told, so it is refused in one line — ``--binary`` names the file;
- anything else (``python -m pkg``, code after ``-c``): ``--binary FILE`` names the file that does.

Every file is opened without blocking and must be a regular file (a FIFO or a device named as the
program is refused in one line), and the whole identification runs under the command's timeout.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from workbench.errors import FormatError, ParamError
from workbench.records import BinaryFile

if TYPE_CHECKING:
    from workbench.measure.engine.spec import EngineCommand

T = TypeVar("T")
_INTERPRETER = re.compile(r"^(?:(?:python|pypy)[\d.]*|bash|sh|dash|zsh|node|perl|ruby|julia|Rscript)$")
_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})  # python options that take a value
_NO_SCRIPT = frozenset({"-c", "-m", "-e", "-"})  # the program is not in a file after these
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# How an interpreter says where its own executable is (a shim hides it).
_SELF_PATH = {"python": ["-c", "import os, sys; print(os.path.realpath(sys.executable))"],
              "pypy": ["-c", "import os, sys; print(os.path.realpath(sys.executable))"],
              "node": ["-p", "process.execPath"], "perl": ["-e", "print $^X"],
              "ruby": ["-e", "print RbConfig.ruby"]}
PROBE_S = 10.0  # the most asking an interpreter behind a shim for its path may take


def build_files(command: EngineCommand, timeout_s: float | None = None) -> list[tuple[str, str]]:
    """(role, real path) of every file that identifies the build ``command`` runs (see the module doc);
    refused in one ParamError line when it cannot be told, or not within ``timeout_s``."""
    return within(timeout_s, lambda: _build_files(command), "--cmd", command.cmd,
                  "identifying the engine's build (a FIFO, or a path on a file system that does not answer?)")


def _build_files(command: EngineCommand) -> list[tuple[str, str]]:
    if command.binary:
        path = os.path.realpath(os.path.expanduser(command.binary))
        if not _regular(path):
            raise ParamError("--binary", command.binary, "no such file, or not a regular file")
        return [("given", path)]
    words = program_words(command)
    found = shutil.which(words[0])
    if found is None:
        raise ParamError("--cmd", command.cmd, f"'{words[0]}' is not an executable file or on PATH "
                         "(give its path, or name the engine's file with --binary)")
    exe = os.path.realpath(found)
    if not _regular(exe):
        raise ParamError("--cmd", command.cmd, f"{exe} is not a regular file (a FIFO or a device cannot be "
                         "the engine)")
    interpreter_named = bool(_INTERPRETER.match(os.path.basename(words[0])) or _INTERPRETER.match(os.path.basename(exe)))
    head = _shebang(exe)
    if head is not None and interpreter_named:  # a shim standing in for an interpreter: what does it run?
        return [("shim", exe), *_through_shim(exe, words[0]), *_script(words[1:])]
    if head is not None:  # a script with its own #! line
        return [*_interpreter(head), ("script", exe)]
    script = _script(words[1:]) if interpreter_named else []
    return [("interpreter", exe), *script] if script else [("executable", exe)]


def describe_build(files: Sequence[tuple[str, str]]) -> str:
    """What was hashed, in words: ``interpreter /usr/bin/python3.11 + script /w/engine.py (through the
    shim /h/.pyenv/shims/python3)``."""
    hashed = " + ".join(f"{role} {path}" for role, path in files if role != "shim")
    shims = [path for role, path in files if role == "shim"]
    return hashed + (f" (through the shim {', '.join(shims)}, hashed too)" if shims else "")


def identify(files: Sequence[tuple[str, str]]) -> tuple[str, str, tuple[BinaryFile, ...]]:
    """(path, hash, files) of a build: one file's own hash, or for several an xxh3_128 over their
    hashes in order, so any file changing changes it. Hashes come from the identity cache when a file's
    realpath, size, mtime and inode are unchanged (the model file is hashed the same way)."""
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


def within(timeout_s: float | None, call: Callable[[], T], option: str, value: str, doing: str) -> T:
    """``call()``, or a ParamError when it has not returned after ``timeout_s`` (a stat or an open that
    blocks cannot be interrupted, so it runs in a thread that is left behind)."""
    if timeout_s is None:
        return call()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=run, name="engine-build", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise ParamError(option, value, f"timed out after {timeout_s:g} s {doing}")
    if "error" in box:
        raise box["error"]
    return box["value"]


def program_words(command: EngineCommand) -> list[str]:
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


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _shebang(path: str) -> list[str] | None:
    """The words of a ``#!`` line, read without blocking from a regular file; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, 256)
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return None
    return head[2:].split(b"\n", 1)[0].decode(errors="replace").split() or None


def _interpreter(words: list[str]) -> list[tuple[str, str]]:
    """The files of the interpreter a ``#!`` line names (``env NAME`` through PATH), itself perhaps a shim."""
    program: str | None = words[0]
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        program = shutil.which(names[0]) if names else None
    if not program or not _regular(program):
        return []
    real = os.path.realpath(program)
    if _shebang(real) is not None and _INTERPRETER.match(os.path.basename(program)):
        return [("shim", real), *_through_shim(real, os.path.basename(program))]
    if _shebang(real) is not None:  # a #! chain: a script standing in for an interpreter it does not name
        raise ParamError("--cmd", program, "the #! line names a script, not an interpreter, and what that script "
                         "runs cannot be told (so it cannot be hashed): name the engine's file with --binary")
    return [("interpreter", real)]


def _through_shim(shim: str, name: str) -> list[tuple[str, str]]:
    """The real interpreter behind a shim, as the interpreter itself says (run through the shim)."""
    family = re.sub(r"[\d.]+$", "", os.path.basename(name))
    probe = _SELF_PATH.get(family)
    if probe is None:
        return []  # no way to ask it: the shim and the script are what can be hashed
    try:
        out = subprocess.run([shim, *probe], capture_output=True, text=True, timeout=PROBE_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ParamError("--cmd", shim, f"cannot ask the interpreter behind this shim for its path: {exc}") from None
    real = os.path.realpath(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else ""
    if not real or not _regular(real):
        raise ParamError("--cmd", shim, f"the interpreter behind this shim did not say where it is "
                         f"(exit {out.returncode}: {out.stderr.strip()[-200:] or 'no output'}); name it with --binary")
    return [("interpreter", real)]


def _script(args: Sequence[str]) -> list[tuple[str, str]]:
    """The script file an interpreter is given (its first non-option argument), if it is a regular file."""
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _NO_SCRIPT:
            return []
        if arg.startswith("-"):
            skip = arg in _VALUE_OPTIONS
            continue
        return [("script", os.path.realpath(arg))] if _regular(arg) else []
    return []


def check_build(command: EngineCommand, timeout_s: float | None = None) -> list[tuple[str, str]]:
    """The build's files, once they can be read and hashed (within ``timeout_s``); else one ParamError."""
    files = build_files(command, timeout_s)
    try:
        within(timeout_s, lambda: identify(files), "--binary" if command.binary else "--cmd", command.cmd,
               "hashing the engine's files")
    except (OSError, FormatError) as exc:
        raise ParamError("--binary" if command.binary else "--cmd", command.cmd,
                         f"cannot hash the engine's files: {exc}") from None
    return files
