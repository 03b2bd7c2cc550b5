"""Whether a file was written by the workbench itself: what an implicit rewrite (the demo re-making a
broken model) may replace, and nothing else.

The synthetic writer marks every file it writes (formats/synth_write.py, synth_shards.py): every GGUF
file of a set carries key/values named ``workbench.synth.*`` (the first split the seed and size, every
split ``workbench.synth.pad``), a safetensors file its ``__metadata__["workbench.synth"]``, a set's
``model.safetensors.index.json`` its ``metadata["workbench.synth"]``. A file is the workbench's when
its header, read within its first MiB without trusting any count past the bytes there, names that mark.
"""
from __future__ import annotations

import json
import struct

MARK = "workbench.synth"  # the key prefix (GGUF) and metadata key (safetensors, index) the writer sets
_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type → bytes
_STRING, _ARRAY = 8, 9


def written_by_workbench(name: str, head: bytes, size: int) -> bool:
    """Whether the file ``name`` whose first bytes are ``head`` (of ``size`` in all) carries the mark."""
    if head.startswith(b"GGUF"):
        return _gguf_marked(head)
    if name.endswith(".json"):
        return _index_marked(head, size)
    return _safetensors_marked(head, size)


def _gguf_marked(head: bytes) -> bool:
    try:
        version, _tensors, n_kv = struct.unpack_from("<IQQ", head, 4)
        if version < 2:
            return False
        at = 24
        for _ in range(min(n_kv, len(head))):
            key, at = _string(head, at)
            if key.startswith(MARK + "."):
                return True
            (kind,), at = struct.unpack_from("<I", head, at), at + 4
            at = _skip(head, at, kind, depth=0)
    except (struct.error, ValueError, UnicodeDecodeError):
        return False  # the header ends inside the bytes read, or is no GGUF header at all
    return False


def _string(head: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", head, at)
    if at + 8 + n > len(head):
        raise ValueError("past the bytes read")
    return head[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n


def _skip(head: bytes, at: int, kind: int, depth: int) -> int:
    if kind in _GGUF_SCALAR:
        return at + _GGUF_SCALAR[kind]
    if kind == _STRING:
        return _string(head, at)[1]
    if kind == _ARRAY and depth < 4:
        item, count = struct.unpack_from("<IQ", head, at)
        at += 12
        if item in _GGUF_SCALAR:
            return at + _GGUF_SCALAR[item] * count
        for _ in range(min(count, len(head))):
            at = _skip(head, at, item, depth + 1)
        return at
    raise ValueError(f"value type {kind}")


def _safetensors_marked(head: bytes, size: int) -> bool:
    if len(head) < 8:
        return False
    (n,) = struct.unpack_from("<Q", head)
    if not 0 < n <= min(size, len(head)) - 8:
        return False
    try:
        meta = json.loads(head[8:8 + n]).get("__metadata__")
    except (ValueError, AttributeError, RecursionError):
        return False
    return isinstance(meta, dict) and MARK in meta


def _index_marked(head: bytes, size: int) -> bool:
    if size > len(head):
        return False
    try:
        meta = json.loads(head).get("metadata")
    except (ValueError, AttributeError, RecursionError):
        return False
    return isinstance(meta, dict) and MARK in meta
