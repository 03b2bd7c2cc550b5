"""Has the model file changed since it was indexed? A writer racing a load (a download still running,
a copy over the file, a truncation) leaves an index whose offsets describe bytes that are gone.

The index keeps the size, mtime and inode it was built from (:func:`workbench.formats.open_index`);
strategies compare them when they open the file and verification compares them again afterwards, so
such a run fails with this reason instead of loading, and verifying, bytes the index never described.
A rewrite within the same clock tick as the file's previous change keeps its mtime and is not seen
here; verification's content comparison still catches bytes that changed during the load.
"""
from __future__ import annotations

import os

from workbench.errors import FormatError
from workbench.formats.index import ModelFile, TensorIndex


def changed_since_indexed(index: TensorIndex | ModelFile, st: os.stat_result | None = None) -> str:
    """'' while the file's size, mtime and inode are those it was indexed with, else what changed; for
    a model of several files, each file's changes, named.

    An index built by hand (``mtime_ns`` 0) is checked on size alone.
    """
    if isinstance(index, TensorIndex):
        if not index.sharded:
            return changed_since_indexed(index.files[0], st)
        return "; ".join(f"{f.name}: {c}" for f in index.files if (c := changed_since_indexed(f)))
    try:
        st = st or os.stat(index.path)
    except OSError as exc:
        return f"cannot stat it any more ({exc.strerror or exc})"
    changes = []
    if st.st_size != index.size:
        changes.append(f"size {index.size} → {st.st_size} bytes")
    if index.mtime_ns and st.st_mtime_ns != index.mtime_ns:
        changes.append(f"mtime {index.mtime_ns} → {st.st_mtime_ns} ns")
    if index.inode and st.st_ino != index.inode:
        changes.append(f"inode {index.inode} → {st.st_ino} (replaced)")
    return ", ".join(changes)


def check_unchanged(index: TensorIndex | ModelFile, fd: int | None = None) -> None:
    """Raise FormatError naming what changed since indexing (through ``fd`` when given: the very file
    about to be read, even if the path was replaced meanwhile; ``index`` is then that one file)."""
    changed = changed_since_indexed(index, os.fstat(fd) if fd is not None else None)
    if changed:
        raise FormatError(index.path, "file", f"changed since it was indexed ({changed}): "
                                              "a writer racing the load? Index it again")
