"""Model file formats → :class:`TensorIndex`.

``open_index(path)`` recognises the format by content, not by file name. A format is a class with
``name``, ``sniff(head: bytes) -> bool`` and ``read_index(path, size) -> TensorIndex``, registered in
:data:`FORMATS`; adding one is a module plus one line here.
"""
from __future__ import annotations

import dataclasses
import os
import stat

from workbench.errors import FormatError
from workbench.formats.index import PAGE_SIZE, ExpertBlob, FileIdentity, TensorIndex, TensorInfo
from workbench.registry import Registry

FORMATS: Registry = Registry("format", {
    "gguf": ("workbench.formats.gguf:GGUFFormat", ""),
    "safetensors": ("workbench.formats.safetensors:SafetensorsFormat", ""),
})

_SNIFF_BYTES = 16


def detect_format(path: str | os.PathLike[str]) -> str:
    """The registered format name whose ``sniff`` accepts the file's first bytes."""
    path, st = _check_path(path)
    return _detect(path, st.st_size)


def open_index(path: str | os.PathLike[str]) -> TensorIndex:
    """Index a model file (GGUF or safetensors, detected by content).

    Parameters
    ----------
    path
        The model file.

    Returns
    -------
    TensorIndex
        Absolute tensor offsets sorted as they lie in the file, and MoE expert blobs.

    Raises
    ------
    FormatError
        Missing path, directory, empty or truncated file, unknown format, or any malformed field.
    """
    path, st = _check_path(path)
    index = FORMATS.get(_detect(path, st.st_size)).read_index(path, st.st_size)
    # stat before the header was read: a change while reading it also shows up as drift later
    return dataclasses.replace(index, mtime_ns=st.st_mtime_ns, inode=st.st_ino)


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


def _detect(path: str, size: int) -> str:
    try:
        with open(path, "rb") as f:
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
    "FORMATS", "PAGE_SIZE", "ExpertBlob", "FileIdentity", "FormatError", "TensorIndex", "TensorInfo",
    "detect_format", "open_index",
]
