"""safetensors → :class:`TensorIndex`, read from the header directly (no safetensors package needed).

Layout: an 8-byte little-endian header length ``N``, ``N`` bytes of JSON (optionally padded with
spaces), then the data region. Each tensor's ``data_offsets`` are relative to the data region; the
index stores absolute offsets (``8 + N + begin``). ``__metadata__`` is a str → str map.
"""
from __future__ import annotations

import json
import math
import struct
from typing import Any, ClassVar

from workbench.errors import FormatError
from workbench.formats.bounds import MAX_TENSORS, check_header_strings, check_tensor_count
from workbench.formats.index import TensorIndex, TensorInfo
from workbench.formats.moe import group_safetensors_experts, group_stacked_safetensors_experts
from workbench.formats.opening import open_regular_file

# Bits per element of every dtype the safetensors spec knows.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
MAX_DIMS = 8  # no real tensor has more; a longer shape is a corrupt header


class SafetensorsFormat:
    """Registry entry for safetensors: content sniffing and indexing."""

    name: ClassVar[str] = "safetensors"

    @staticmethod
    def sniff(head: bytes) -> bool:
        """An 8-byte length followed by '{' (the JSON header)."""
        return len(head) >= 9 and head[8:9] == b"{"

    @staticmethod
    def read_index(path: str, size: int, max_tensors: int = MAX_TENSORS) -> TensorIndex:
        return read_safetensors_index(path, size, max_tensors)


def read_safetensors_index(path: str, size: int, max_tensors: int = MAX_TENSORS) -> TensorIndex:
    """Index a safetensors file of ``size`` bytes holding at most ``max_tensors`` tensors (what its
    model has left of :data:`~workbench.formats.bounds.MAX_TENSORS`); FormatError on anything malformed."""
    header, data_offset = _read_header(path, size, max_tensors)
    metadata = _read_metadata(path, header.pop("__metadata__", None))
    check_tensor_count(path, "header", len(header), max_tensors)  # before a TensorInfo is made
    tensors = [_read_tensor(path, name, entry, data_offset, size) for name, entry in header.items()]
    tensors.sort(key=lambda t: (t.offset, t.nbytes))
    _check_overlaps(path, tensors)
    blobs = group_safetensors_experts(tensors) + group_stacked_safetensors_experts(path, tensors)
    return TensorIndex(
        path=path, format="safetensors", size=size, data_offset=data_offset, alignment=8,
        tensors=tuple(tensors), blobs=tuple(sorted(blobs, key=lambda b: (b.layer, b.offset))),
        metadata=metadata,
    )


def _read_header(path: str, size: int, max_tensors: int) -> tuple[dict[str, Any], int]:
    if size < 8:
        raise FormatError(path, "header length", f"truncated: file has {size} bytes, needs at least 8")
    with open_regular_file(path) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            raise FormatError(path, "header length", f"{n} bytes runs past the end of the {size}-byte file")
        if n > MAX_HEADER:
            raise FormatError(path, "header length", f"{n} bytes exceeds the {MAX_HEADER}-byte limit")
        raw = f.read(n)
    check_header_strings(path, raw, max_tensors)  # parsing 1.4 M entries alone takes seconds
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise FormatError(path, "header", "JSON nested too deeply") from None
    except KeyError as exc:
        raise FormatError(path, "header", f"{exc.args[0]}") from None
    except ValueError as exc:  # bad UTF-8 or JSON, and ints past Python's 4300-digit limit
        raise FormatError(path, "header", f"not valid UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict):
        raise FormatError(path, "header", f"expected a JSON object, got {type(header).__name__}")
    return header, 8 + n


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Every JSON object's keys: unique, and real Unicode (JSON can escape a lone surrogate, UTF-8 cannot
    hold one, and the safetensors library refuses it)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        raise KeyError(f"duplicate key {next(k for k, _ in pairs if k in seen or seen.add(k))!r}")
    bad = next((k for k in out if not _is_unicode(k)), None)
    if bad is not None:
        raise KeyError(f"key {bad!r} is not valid Unicode (a lone surrogate escape)")
    return out


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_metadata(path: str, meta: object) -> tuple[tuple[str, str], ...]:
    if meta is None:
        return ()
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FormatError(path, "__metadata__", "must be an object of string values")
    bad = next((v for v in meta.values() if not _is_unicode(v)), None)
    if bad is not None:
        raise FormatError(path, "__metadata__", f"value {bad!r} is not valid Unicode (a lone surrogate escape)")
    return tuple(sorted(meta.items()))


def _read_tensor(path: str, name: str, entry: object, data_offset: int, size: int) -> TensorInfo:
    field = f"tensor '{name}'"
    if not isinstance(entry, dict):
        raise FormatError(path, field, "entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:  # a list or object is not even hashable
        raise FormatError(path, f"{field}.dtype", f"unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise FormatError(path, f"{field}.shape", f"must be a list of non-negative ints, got {shape!r}")
    if len(shape) > MAX_DIMS:
        raise FormatError(path, f"{field}.shape", f"{len(shape)} dimensions (at most {MAX_DIMS})")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_uint(o) for o in offsets) or offsets[0] > offsets[1]):
        raise FormatError(path, f"{field}.data_offsets", f"must be [begin, end] with begin <= end, got {offsets!r}")
    begin, end = offsets
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        need = f"{bits // 8}" + (" and a fraction" if bits % 8 else "")  # ints: shapes may be absurd
        raise FormatError(path, f"{field}.data_offsets", f"{end - begin} bytes but {dtype}{list(shape)} needs {need}")
    if data_offset + end > size:
        raise FormatError(path, f"{field}.data_offsets",
                          f"range [{data_offset + begin}, {data_offset + end}) runs past the end of the "
                          f"{size}-byte file")
    return TensorInfo(name, data_offset + begin, end - begin, dtype, tuple(shape))


def _is_uint(value: object) -> bool:
    """A JSON non-negative integer (``true``/``false`` are ints to Python, not to safetensors)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_overlaps(path: str, tensors: list[TensorInfo]) -> None:
    """``tensors`` sorted by offset; empty tensors overlap nothing."""
    prev: TensorInfo | None = None
    for t in tensors:
        if t.nbytes == 0:
            continue
        if prev is not None and t.offset < prev.end:
            raise FormatError(path, f"tensor '{t.name}'.data_offsets",
                              f"overlaps tensor '{prev.name}' ([{t.offset}, {t.end}) vs [{prev.offset}, {prev.end}))")
        prev = t
