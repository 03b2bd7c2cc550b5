"""Writing an output file: never onto the command's own input, never over a ledger or a model nobody
asked to replace, and never half-written or through someone else's link.

A command that writes a file (``synth``, ``ledger export`` and its figures, a report) passes its output path through
:func:`refuse_overwrite`: a path that is one of its inputs (the ledger it reads, that ledger's ``-wal``
and ``-shm``; compared by inode, so a hard or symbolic link is caught) is refused always, and an
existing SQLite database or model file (GGUF, safetensors) is refused unless ``force``. The bytes go to
a new file beside the target, created exclusively, and are renamed over it once complete
(:func:`write_text`, :func:`partial_path`): a killed command leaves the old file whole, and a link
planted at the target is replaced, never followed.
"""
from __future__ import annotations

import os
import secrets
import stat
import struct
from pathlib import Path
from typing import Iterable

from workbench.errors import OutputError

SIDE_FILES = ("-wal", "-shm", "-journal")  # SQLite's files beside a database
SQLITE = "an SQLite database (a ledger?)"


def ledger_files(path: str | os.PathLike[str]) -> list[Path]:
    """A ledger and the files SQLite keeps beside it: what a command reading it must never write over."""
    return [Path(path)] + [Path(f"{path}{side}") for side in SIDE_FILES]


def describe_existing(path: str | os.PathLike[str]) -> str | None:
    """What an existing file at ``path`` is when it must not be replaced lightly ('an SQLite database',
    'a GGUF model', 'a safetensors model', a set's safetensors index), else None (missing, or any other
    file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head, size = os.pread(fd, 4096, 0), st.st_size
    finally:
        os.close(fd)
    if _is_index(os.fspath(path), head):
        return "a safetensors index (a model set)"
    if head.startswith(b"SQLite format 3\0"):
        return SQLITE
    if head.startswith(b"GGUF"):
        return "a GGUF model"
    if len(head) >= 9 and head[8:9] == b"{" and 0 < struct.unpack("<Q", head[:8])[0] <= size - 8:
        return "a safetensors model"
    return None


def _is_index(name: str, head: bytes) -> bool:
    """A safetensors set's ``*.safetensors.index.json``: replacing it re-points the set at other shards."""
    text = head.lstrip()
    return text.startswith(b"{") and (name.endswith(".safetensors.index.json") or b'"weight_map"' in text)


def refuse_overwrite(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (),
                     force: bool = False) -> Path:
    """``path``, unless writing there would replace one of ``inputs`` (always refused) or an existing
    ledger or model (refused unless ``force``); the refusal is one :class:`OutputError` line."""
    target = Path(path)
    for source in inputs:
        if _same_file(target, Path(source)):
            raise OutputError(target, f"is {source}, which this command reads; refusing to write over its own "
                                      "input (name another output file)")
    kind = describe_existing(target)
    if kind is not None and not force:
        raise OutputError(target, f"already exists and is {kind}; refusing to write over it (pass --force to "
                                  "replace it, or name another output file)")
    return target


def claim_output(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """``path`` made ready for a writer that opens it by name (papermill's output notebook): refused as
    :func:`refuse_overwrite` refuses (never ``force``d), and a symbolic link there removed, so the writer
    makes a new file instead of writing through the link."""
    target = refuse_overwrite(path, inputs=inputs)
    if os.path.islink(target):
        os.unlink(target)
    return target


def partial_path(path: str | os.PathLike[str]) -> str:
    """A new, empty file beside ``path`` (created exclusively: no link or file of anyone else's is
    reused) to write into and then rename over ``path``."""
    directory, name = os.path.split(os.fspath(path))
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.partial")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise OutputError(path, "cannot make a temporary file beside it")


def write_text(path: str | os.PathLike[str], text: str, *, inputs: Iterable[str | os.PathLike[str]] = (),
               force: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename, after
    :func:`refuse_overwrite`; returns the path."""
    return write_bytes(path, text.encode("utf-8"), inputs=inputs, force=force)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, inputs: Iterable[str | os.PathLike[str]] = (),
                force: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename, after :func:`refuse_overwrite`
    (a figure, a page: every file a command writes goes this way); returns the path."""
    target = refuse_overwrite(path, inputs=inputs, force=force)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(target)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the same path is still the same file
        return os.path.realpath(a) == os.path.realpath(b)
