"""Writing an output file: never onto the command's own input, never over a ledger or a model nobody
asked to replace, never through a link below where the user pointed, and never half-written.

A command that writes a file (``synth``, ``ledger export`` and its figures, a report, a sweep's
notebooks, the demo's models) passes every output through :func:`refuse_overwrite` before it writes
any: a path that is one of its inputs (the ledger it reads, that ledger's ``-wal`` and ``-shm``;
compared by inode, so a hard or symbolic link is caught) is refused always; an existing SQLite database
or model file (GGUF, safetensors, a set's index) is refused unless ``force``; and an implicit rewrite
(``ours_only``: the demo re-making a broken model) replaces nothing but a file the workbench wrote
itself (:mod:`workbench.output.origin`). The bytes are written by :class:`workbench.output.outdir.OutDir`: the
directory reached without following a link below its anchor, a new exclusively created file in it,
flushed and renamed over the target — a killed command or a full disk leaves the old file whole, and
a link planted at the target is replaced, never followed.
"""
from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import Iterable

from workbench.errors import OutputError
from workbench.output.outdir import OutDir

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
    return describe_head(os.fspath(path), head, size)


def describe_head(name: str, head: bytes, size: int) -> str | None:
    """:func:`describe_existing` from a file's first bytes and its size."""
    if _is_index(name, head):
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
                     force: bool = False, ours_only: bool = False) -> Path:
    """``path``, unless writing there would replace one of ``inputs`` (always refused), an existing
    ledger or model (refused unless ``force``), or, with ``ours_only`` (an implicit rewrite: never
    ``force``), anything but a regular file the workbench wrote; the refusal is one :class:`OutputError`
    line."""
    target = Path(path)
    for source in inputs:
        if _same_file(target, Path(source)):
            raise OutputError(target, f"is {source}, which this command reads; refusing to write over its own "
                                      "input (name another output file)")
    if ours_only:
        _refuse_unless_ours(target)
        return target
    kind = describe_existing(target)
    if kind is not None and not force:
        raise OutputError(target, f"already exists and is {kind}; refusing to write over it (pass --force to "
                                  "replace it, or name another output file)")
    return target


def _refuse_unless_ours(target: Path) -> None:
    from workbench.output.origin import written_by_workbench

    if not os.path.lexists(target):
        return
    if os.path.islink(target):
        raise OutputError(target, "is a link, not a file the workbench wrote; refusing to replace it "
                                  "(move it away to have the workbench write its own file here)")
    with OutDir.open(target.parent, create=False) as directory:
        head = directory.head(target.name)
    if head is None or not written_by_workbench(target.name, *head):
        kind = describe_head(target.name, *head) if head else None
        raise OutputError(target, f"is {kind or 'a file'} the workbench did not write; refusing to replace it "
                                  "(move it away to have the workbench write its own file here)")


def claim_output(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = (),
                 made: int = 0) -> Path:
    """``path`` made ready for a writer that opens it by name (papermill's output notebook): refused as
    :func:`refuse_overwrite` refuses (never ``force``d), its directory reached as :class:`OutDir` reaches
    it (the last ``made`` directories never through a link), and a symbolic link at ``path`` removed, so
    the writer makes a new file instead of writing through the link."""
    target = refuse_overwrite(path, inputs=inputs)
    with OutDir.open(target.parent, made=made) as directory:
        st = directory.lstat(target.name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            os.unlink(target.name, dir_fd=directory.fd)
    return target


def write_text(path: str | os.PathLike[str], text: str, *, inputs: Iterable[str | os.PathLike[str]] = (),
               force: bool = False, made: int = 0) -> Path:
    """Write ``text`` (UTF-8) to ``path`` as :func:`write_bytes` writes; returns the path."""
    return write_bytes(path, text.encode("utf-8"), inputs=inputs, force=force, made=made)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, inputs: Iterable[str | os.PathLike[str]] = (),
                force: bool = False, made: int = 0) -> Path:
    """Write ``data`` to ``path`` after :func:`refuse_overwrite`, through :class:`OutDir` (the last
    ``made`` directories above ``path`` are the workbench's own: never reached through a link) and a
    temporary file renamed over it (a figure, a page: every file a command writes goes this way);
    returns the path. Any error writing is one OutputError line, the old file intact."""
    target = refuse_overwrite(path, inputs=inputs, force=force)
    with OutDir.open(target.parent, made=made) as directory:
        directory.write_bytes(target.name, data)
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): the same path is still the same file
        return os.path.realpath(a) == os.path.realpath(b)
