"""GGUF → :class:`TensorIndex` through gguf-py's ``GGUFReader``.

gguf-py trusts the file: a 2^60 array length makes it loop for ever, an unknown dtype raises a bare
ValueError. So the header is walked first, here, with every count and length checked against the
file size (:func:`validate_gguf_header`); only a header that passes is handed to gguf-py, and any
error it still raises becomes a :class:`FormatError`.

Shapes: GGUF (and gguf-py's ``ReaderTensor.shape``) list dimensions in ggml order, ``ne0`` (the
contiguous row length) first. The index stores numpy/PyTorch order, slowest dimension first, so a
stacked expert tensor ``blk.N.ffn_gate_exps.weight`` reads ``(n_experts, n_ff, n_embd)``.
Offsets are absolute (from byte 0 of the file): gguf-py's ``data_offset`` already is.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import ClassVar

from workbench.errors import FormatError
from workbench.formats.index import TensorIndex, TensorInfo
from workbench.formats.moe import group_gguf_experts
from workbench.formats.opening import open_regular_file

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_MIN_KV, _MIN_TENSOR_INFO = 8 + 4 + 1, 8 + 4 + 4 + 8  # smallest possible encodings, for count checks


class GGUFFormat:
    """Registry entry for GGUF: content sniffing and indexing."""

    name: ClassVar[str] = "gguf"

    @staticmethod
    def sniff(head: bytes) -> bool:
        return head[:4] == MAGIC

    @staticmethod
    def read_index(path: str, size: int) -> TensorIndex:
        return read_gguf_index(path, size)


@dataclass(frozen=True)
class GGUFHeader:
    """What the validating walk learned: layout facts and where each key/value record sits."""

    version: int
    alignment: int
    data_offset: int
    n_tensors: int
    kv_start: int
    kv_end: int
    kvs: tuple[tuple[str, int, int, str], ...]  # (key, record offset, value type, array summary or "")


def read_gguf_index(path: str, size: int) -> TensorIndex:
    """Index a GGUF file of ``size`` bytes; raises :class:`FormatError` on anything malformed."""
    header = validate_gguf_header(path, size)
    try:
        reader = _open_reader(path, header)
        tensors = [_tensor_info(t) for t in reader.tensors]
        metadata = _metadata(reader, header)
        data_offset, alignment = int(reader.data_offset), int(reader.alignment)
        del reader  # drops gguf-py's memmap of the file
    except Exception as exc:  # gguf-py signals bad input with assorted exception types
        raise FormatError(path, "gguf", f"gguf-py cannot read it: {type(exc).__name__}: {exc}") from None
    if (data_offset, alignment) != (header.data_offset, header.alignment):
        raise FormatError(path, "data_offset", f"gguf-py says {data_offset}/{alignment}, header walk says "
                                               f"{header.data_offset}/{header.alignment}")
    tensors.sort(key=lambda t: (t.offset, t.nbytes))
    return TensorIndex(
        path=path, format="gguf", size=size, data_offset=data_offset, alignment=alignment,
        tensors=tuple(tensors), blobs=group_gguf_experts(path, tensors), metadata=metadata,
    )


def _open_reader(path: str, header: GGUFHeader):  # noqa: ANN202 - a gguf.GGUFReader
    """gguf-py's reader, told to skip the array key/values the walk already checked.

    GGUFReader parses every array element in Python: ~10 s for a 150k-token vocabulary on a busy
    core, against ~0.3 s for the walk. Tensor infos, alignment and data offset stay gguf-py's.
    """
    from gguf import GGUFReader

    class SkipArraysReader(GGUFReader):
        def _build_fields(self, offs: int, count: int) -> int:
            if (offs, count) != (header.kv_start, len(header.kvs)):
                return super()._build_fields(offs, count)
            for _, kv_offset, vtype, _ in header.kvs:
                if vtype != _ARRAY:
                    super()._build_fields(kv_offset, 1)
            return header.kv_end

    # Only a gguf-py without the hook gets the plain reader (slow but right). A file that the fast
    # reader refuses is not tried again: the plain one would refuse it too, after parsing every array.
    hooked = callable(getattr(GGUFReader, "_build_fields", None))
    return SkipArraysReader(path, "r") if hooked else GGUFReader(path, "r")


def _tensor_info(t) -> TensorInfo:  # noqa: ANN001 - gguf.ReaderTensor
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml order → numpy order
    return TensorInfo(t.name, int(t.data_offset), int(t.n_bytes), t.tensor_type.name, shape)


def _metadata(reader, header: GGUFHeader) -> tuple[tuple[str, str], ...]:  # noqa: ANN001 - GGUFReader
    out = []
    for key, _, _, summary in header.kvs:
        field = reader.fields.get(key)
        if summary or field is None:
            out.append((key, summary or "?"))
        else:
            out.append((key, str(field.contents())[:200]))
    return tuple(out)


class _Walker:
    """Bounds-checked reads over the mapped header; every overrun is a FormatError naming the field."""

    def __init__(self, path: str, buf: mmap.mmap, size: int):
        self.path, self.buf, self.size, self.pos, self.order = path, buf, size, 0, "<"

    def take(self, n: int, field: str) -> int:
        if n > self.size - self.pos:
            raise FormatError(self.path, field, f"truncated: needs {n} bytes at offset {self.pos}, "
                                                f"file has {self.size}")
        start, self.pos = self.pos, self.pos + n
        return start

    def uint(self, n: int, field: str) -> int:
        return struct.unpack_from(self.order + ("I" if n == 4 else "Q"), self.buf, self.take(n, field))[0]

    def string(self, field: str) -> str:
        """A length-prefixed string that must be UTF-8 (keys, names, values: gguf-py decodes them strictly)."""
        n = self.uint(8, f"{field} length")
        start = self.take(n, field)
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(self.path, field, f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None

    def skip_string(self, field: str) -> None:
        """A string inside an array: skipped unread (real vocabularies hold byte tokens that are not UTF-8)."""
        self.take(self.uint(8, f"{field} length"), field)

    def remaining(self) -> int:
        return self.size - self.pos


def validate_gguf_header(path: str, size: int) -> GGUFHeader:
    """Walk the GGUF header checking every count, length, dtype and tensor range against ``size``."""
    if size < 24:
        raise FormatError(path, "header", f"truncated: {size} bytes, a GGUF header needs at least 24")
    with open_regular_file(path) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        w = _Walker(path, buf, size)
        version, n_tensors, n_kv = _walk_counts(w)
        kv_start = w.pos
        alignment, kvs = _walk_kvs(w, n_kv)
        kv_end = w.pos
        infos = [_walk_tensor_info(w, i) for i in range(n_tensors)]
    data_offset = -(-w.pos // alignment) * alignment
    _check_tensor_ranges(path, infos, data_offset, alignment, size)
    return GGUFHeader(version, alignment, data_offset, n_tensors, kv_start, kv_end, tuple(kvs))


def _walk_counts(w: _Walker) -> tuple[int, int, int]:
    if bytes(w.buf[0:4]) != MAGIC:
        raise FormatError(w.path, "magic", f"expected b'GGUF', got {bytes(w.buf[0:4])!r}")
    w.take(4, "magic")
    version = w.uint(4, "version")
    if version & 0xFFFF == 0:  # written on a big-endian host: gguf-py reads these byte-swapped
        w.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
    if version not in (2, 3):
        raise FormatError(w.path, "version", f"GGUF version {version} is not supported (2 or 3)")
    n_tensors, n_kv = w.uint(8, "tensor_count"), w.uint(8, "kv_count")
    if n_kv * _MIN_KV > w.remaining():
        raise FormatError(w.path, "kv_count", f"{n_kv} key/values cannot fit in the {w.remaining()} bytes left "
                                          "(truncated file or corrupt count)")
    if n_tensors * _MIN_TENSOR_INFO > w.remaining():
        raise FormatError(w.path, "tensor_count", f"{n_tensors} tensors cannot fit in the {w.remaining()} bytes "
                                              "left (truncated file or corrupt count)")
    return version, n_tensors, n_kv


def _walk_kvs(w: _Walker, n_kv: int) -> tuple[int, list[tuple[str, int, int, str]]]:
    """Skip over every key/value (checking lengths); return general.alignment and the records."""
    alignment, seen, kvs = DEFAULT_ALIGNMENT, set(), []
    for i in range(n_kv):
        start = w.pos
        key = w.string(f"kv[{i}].key")
        label = key if key.strip() and key.isprintable() else f"kv[{i}]"  # errors name a blank key by place
        if key in seen:
            raise FormatError(w.path, label, "duplicate key")
        seen.add(key)
        vtype = w.uint(4, f"{label}.type")
        if key == "general.alignment":
            if vtype != _UINT32:
                raise FormatError(w.path, key, f"must be UINT32, got value type {vtype}")
            alignment = w.uint(4, key)
            if alignment == 0 or alignment & (alignment - 1):
                raise FormatError(w.path, key, f"{alignment} is not a power of two")
        else:
            _skip_value(w, vtype, label, depth=0)
        kvs.append((key, start, vtype, _array_summary(w, start, vtype)))
    return alignment, kvs


def _array_summary(w: _Walker, start: int, vtype: int) -> str:
    """"array[STRING] x 151936" for an array record at ``start``, else ""."""
    if vtype != _ARRAY:
        return ""
    from gguf import GGUFValueType

    pos = start + 8 + struct.unpack_from(w.order + "Q", w.buf, start)[0] + 4
    itype, count = struct.unpack_from(w.order + "IQ", w.buf, pos)
    return f"array[{GGUFValueType(itype).name}] x {count}"


def _skip_value(w: _Walker, vtype: int, field: str, depth: int) -> None:
    if vtype in _SCALAR_SIZES:
        w.take(_SCALAR_SIZES[vtype], field)
    elif vtype == _STRING:
        w.skip_string(field) if depth else w.string(field)
    elif vtype == _ARRAY and depth < 4:
        itype, count = w.uint(4, f"{field}.item_type"), w.uint(8, f"{field}.count")
        if itype not in _SCALAR_SIZES and itype not in (_STRING, _ARRAY):  # checked even when empty
            raise FormatError(w.path, f"{field}.item_type", f"unknown GGUF value type {itype}")
        if itype in _SCALAR_SIZES:
            w.take(count * _SCALAR_SIZES[itype], f"{field}[{count}]")
            return
        if count * 8 > w.remaining():  # every string or nested array takes at least 8 bytes
            raise FormatError(w.path, f"{field}.count", f"{count} items cannot fit in a {w.size}-byte file")
        for j in range(count):
            _skip_value(w, itype, f"{field}[{j}]", depth + 1)
    elif vtype == _ARRAY:
        raise FormatError(w.path, f"{field}.type", f"arrays nested deeper than {depth} levels")
    else:
        raise FormatError(w.path, f"{field}.type", f"unknown GGUF value type {vtype}")


def _walk_tensor_info(w: _Walker, i: int) -> tuple[str, int, int, int]:
    """One tensor-info record → (name, relative offset, nbytes, ggml type)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    name = w.string(f"tensor[{i}].name")
    n_dims = w.uint(4, f"tensor '{name}'.n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise FormatError(w.path, f"tensor '{name}'.n_dims", f"{n_dims} dimensions (1..{MAX_DIMS} allowed)")
    dims = [w.uint(8, f"tensor '{name}'.dims") for _ in range(n_dims)]
    if max(dims) >= 1 << 63:  # ggml's ne are int64; numpy cannot shape them either
        raise FormatError(w.path, f"tensor '{name}'.dims", f"{max(dims)} exceeds int64 (dims {dims})")
    raw_type = w.uint(4, f"tensor '{name}'.dtype")
    offset = w.uint(8, f"tensor '{name}'.offset")
    if raw_type not in GGMLQuantizationType._value2member_map_ or \
            GGMLQuantizationType(raw_type) not in GGML_QUANT_SIZES:
        raise FormatError(w.path, f"tensor '{name}'.dtype", f"unknown ggml type {raw_type}")
    block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(raw_type)]
    if dims[0] % block:
        raise FormatError(w.path, f"tensor '{name}'.dims",
                          f"row length {dims[0]} is not a multiple of the {block}-element block")
    n_elements = 1
    for d in dims:
        n_elements *= d
    return name, offset, n_elements // block * type_size, raw_type


def _check_tensor_ranges(path: str, infos: list[tuple[str, int, int, int]], data_offset: int,
                         alignment: int, size: int) -> None:
    names: set[str] = set()
    prev = None
    for name, offset, nbytes, _ in sorted(infos, key=lambda x: (x[1], x[2])):
        if name in names:
            raise FormatError(path, f"tensor '{name}'", "duplicate tensor name")
        names.add(name)
        start = data_offset + offset
        if offset % alignment:
            raise FormatError(path, f"tensor '{name}'.offset", f"{offset} is not a multiple of {alignment}")
        if start + nbytes > size:
            raise FormatError(path, f"tensor '{name}'.offset",
                              f"range [{start}, {start + nbytes}) runs past the end of the {size}-byte file")
        if prev is not None and nbytes and start < prev[1]:
            raise FormatError(path, f"tensor '{name}'.offset",
                              f"[{start}, {start + nbytes}) overlaps tensor '{prev[0]}' ending at {prev[1]}")
        if nbytes:
            prev = (name, start + nbytes)
