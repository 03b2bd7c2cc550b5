"""Model formats → :class:`TensorIndex`.

``open_index(path)`` takes a model: one file, a directory, a safetensors index or any shard of a set
(resolve.py says which files that is), indexes each file by its format — recognised by content, not by
file name — and checks them as one set (sets.py). A format is a class with ``name``,
``sniff(head: bytes) -> bool`` and ``read_index(path, size, max_tensors) -> TensorIndex``, registered in
:data:`FORMATS`; adding one is a module plus one line here.
"""
from __future__ import annotations

import dataclasses
import os
import stat

from workbench.errors import FormatError
from workbench.formats.bounds import MAX_TENSORS
from workbench.formats.index import PAGE_SIZE, ExpertBlob, FileIdentity, ModelFile, TensorIndex, TensorInfo
from workbench.formats.opening import open_regular_file
from workbench.registry import Registry

FORMATS: Registry = Registry("format", {
    "gguf": ("workbench.formats.gguf:GGUFFormat", ""),
    "safetensors": ("workbench.formats.safetensors:SafetensorsFormat", ""),
})

_SNIFF_BYTES = 16


def detect_format(path: str | os.PathLike[str]) -> str:
    """The registered format name whose ``sniff`` accepts the file's first bytes."""
    path, st = _check_path(path)
    return _detect(path, st)


def open_index(path: str | os.PathLike[str]) -> TensorIndex:
    """Index a model: one file (GGUF or safetensors, detected by content) or a set of files.

    Parameters
    ----------
    path
        A model file, a shard of a set (its siblings come with it), a ``*.safetensors.index.json``, or
        a directory holding one model.

    Returns
    -------
    TensorIndex
        Every tensor with its file and absolute offset in it (file by file, in file order), the files
        of the set, and MoE expert blobs.

    Raises
    ------
    FormatError
        Missing path, empty or truncated file, unknown format, any malformed field, and for a set: a
        missing or foreign shard, a member outside the model's directory, a tensor in no file or in
        two, an index or split keys that disagree with the files.
    """
    from workbench.formats.resolve import resolve_model
    from workbench.formats.sets import index_set

    return index_set(resolve_model(path), open_file_index)


def open_file_index(path: str | os.PathLike[str], max_tensors: int = MAX_TENSORS) -> TensorIndex:
    """Index one model file on its own (no set resolution): what :func:`open_index` does per member,
    with ``max_tensors`` what its model has left of the one cap (FormatError past it, before indexing)."""
    path, st = _check_path(path)
    index = FORMATS.get(_detect(path, st)).read_index(path, st.st_size, max_tensors)
    # stat before the header was read: a change while reading it also shows up as drift later
    return dataclasses.replace(index, mtime_ns=st.st_mtime_ns, inode=st.st_ino, files=())


def _check_path(path: str | os.PathLike[str]) -> tuple[str, os.stat_result]:
    path = os.path.abspath(os.fspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file") from None
    except OSError as exc:
        raise FormatError(path, "path", exc.strerror or str(exc)) from None
    if stat.S_ISDIR(st.st_mode):
        raise FormatError(path, "path", "is a directory, not a model file")
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(path, "path", "not a regular file")
    if st.st_size == 0:
        raise FormatError(path, "size", "empty file")
    return path, st


def _detect(path: str, st: os.stat_result) -> str:
    size = st.st_size
    try:
        with open_regular_file(path, expect=st) as f:  # never blocks on a FIFO swapped in after the stat
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        raise FormatError(path, "path", exc.strerror or str(exc)) from None
    for name in FORMATS:
        if FORMATS.get(name).sniff(head):
            return name
    if size < 9:
        raise FormatError(path, "magic", f"truncated: {size} bytes is too short for any known format")
    raise FormatError(path, "magic", f"not a {' or '.join(FORMATS.names())} file (starts with {head[:8]!r})")


__all__ = [
    "FORMATS", "PAGE_SIZE", "ExpertBlob", "FileIdentity", "FormatError", "ModelFile", "TensorIndex", "TensorInfo",
    "detect_format", "open_file_index", "open_index",
]
