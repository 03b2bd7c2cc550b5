"""The GGUF header, walked once with every count, length, dtype and range checked against the file size.

gguf-py's ``GGUFReader`` trusts the file (a 2^60 array length makes it loop for ever, an unknown
dtype raises a bare ValueError) and costs far more than the index needs: it builds a numpy view of
the file for every header field and every tensor (14.7 ms of a 20 ms index on a 157-tensor, 2 GiB
MoE file, 2-core VM, 2026-12-03; docs/benchmarks/gguf-index-host.md). So the walk here reads the
header itself and gives everything the index holds; the format's tables are gguf-py's (value types
and their numpy scalar types, ggml types with their block and type sizes: :func:`gguf_tables`), and
tests/test_formats_gguf_oracle.py holds the result against gguf-py's plain reader.

Shapes come out in numpy order (slowest dimension first: the file lists ``ne0``, the contiguous row
length, first); offsets are absolute (data offset + the tensor's own).
"""
from __future__ import annotations

import functools
import itertools
import math
import mmap
import struct
from dataclasses import dataclass
from typing import Any

from workbench.errors import FormatError
from workbench.formats.bounds import MAX_KV, MAX_KV_ITEMS, MAX_TENSORS, check_tensor_count
from workbench.formats.index import TensorInfo
from workbench.formats.opening import open_regular_file

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_MIN_KV, _MIN_TENSOR_INFO = 8 + 4 + 1, 8 + 4 + 4 + 8  # smallest possible encodings, for count checks


@dataclass(frozen=True)
class GGUFTables:
    """gguf-py's knowledge of the format, keyed by the raw numbers the file holds."""

    scalars: dict[int, Any]  # value type → numpy dtype (GGUFReader.gguf_scalar_to_np)
    sizes: dict[int, int]  # value type → bytes
    value_names: dict[int, str]  # value type → GGUFValueType name
    quants: dict[int, tuple[str, int, int]]  # ggml type → (name, block elements, block bytes)


@functools.cache
def gguf_tables() -> GGUFTables:
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType

    scalars = {int(vt): np.dtype(nt) for vt, nt in GGUFReader.gguf_scalar_to_np.items()}
    return GGUFTables(scalars, {vt: dt.itemsize for vt, dt in scalars.items()},
                      {int(vt): vt.name for vt in GGUFValueType},
                      {int(t): (t.name, block, size) for t, (block, size) in GGML_QUANT_SIZES.items()})


@dataclass(frozen=True)
class GGUFHeader:
    """What the walk read: layout facts, the tensors in file order, the key/values as text."""

    version: int
    alignment: int
    data_offset: int
    tensors: tuple[TensorInfo, ...]
    metadata: tuple[tuple[str, str], ...]  # an array as "array[STRING] x 151936", a value as gguf-py shows it


class _Walker:
    """Bounds-checked reads over the mapped header; every overrun is a FormatError naming the field."""

    def __init__(self, path: str, buf: mmap.mmap, size: int, tables: GGUFTables):
        self.path, self.buf, self.size, self.pos, self.tables = path, buf, size, 0, tables
        self.items_left = MAX_KV_ITEMS  # strings and arrays stepped over one by one, in all the key/values
        self.order = "<"

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


def walk_gguf_header(path: str, size: int, max_tensors: int = MAX_TENSORS) -> GGUFHeader:
    """Read and check the header of the GGUF file at ``path`` (``size`` bytes, at most ``max_tensors``
    tensors and :data:`~workbench.formats.bounds.MAX_KV` key/values); FormatError on anything bad."""
    if size < 24:
        raise FormatError(path, "header", f"truncated: {size} bytes, a GGUF header needs at least 24")
    with open_regular_file(path) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        w = _Walker(path, buf, size, gguf_tables())
        version, n_tensors, n_kv = _walk_counts(w)
        check_tensor_count(path, "tensor_count", n_tensors, max_tensors)  # before any record is read
        if n_kv > MAX_KV:
            raise FormatError(path, "kv_count", f"{n_kv:,} key/values: more than the {MAX_KV:,} a GGUF may "
                                                "hold (real files hold 20–60)")
        alignment, metadata = _walk_kvs(w, n_kv)
        infos = [_walk_tensor_info(w, i) for i in range(n_tensors)]
    data_offset = -(-w.pos // alignment) * alignment
    _check_tensor_ranges(path, infos, data_offset, alignment, size)
    tensors = tuple(TensorInfo(name, data_offset + offset, nbytes, dtype, shape, path)
                    for name, offset, nbytes, dtype, shape in infos)
    return GGUFHeader(version, alignment, data_offset, tensors, tuple(metadata))


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


def _walk_kvs(w: _Walker, n_kv: int) -> tuple[int, list[tuple[str, str]]]:
    """Every key/value checked; general.alignment and each value as text (an array: its summary)."""
    alignment, seen, out = DEFAULT_ALIGNMENT, set(), []
    for i in range(n_kv):
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
            out.append((key, str(alignment)))
            continue
        start = w.pos
        _skip_value(w, vtype, label, depth=0)
        out.append((key, _value_text(w, start, vtype)))
    return alignment, out


def _value_text(w: _Walker, at: int, vtype: int) -> str:
    """The value at ``at`` (already checked) as ``str(ReaderField.contents())[:200]`` shows it, decoded
    with gguf-py's numpy scalar type; an array as "array[STRING] x 151936" (its items are not read)."""
    if vtype == _ARRAY:
        itype, count = struct.unpack_from(w.order + "IQ", w.buf, at)
        return f"array[{w.tables.value_names[itype]}] x {count}"
    if vtype == _STRING:
        n = struct.unpack_from(w.order + "Q", w.buf, at)[0]
        return bytes(w.buf[at + 8:at + 8 + n]).decode("utf-8")[:200]
    import numpy as np

    dtype = w.tables.scalars[vtype].newbyteorder(w.order)
    return str(np.frombuffer(bytes(w.buf[at:at + dtype.itemsize]), dtype=dtype).tolist()[0])[:200]


def _skip_value(w: _Walker, vtype: int, field: str, depth: int) -> None:
    sizes = w.tables.sizes
    if vtype in sizes:
        w.take(sizes[vtype], field)
    elif vtype == _STRING:
        w.skip_string(field) if depth else w.string(field)
    elif vtype == _ARRAY and depth < 4:
        itype, count = w.uint(4, f"{field}.item_type"), w.uint(8, f"{field}.count")
        if itype not in sizes and itype not in (_STRING, _ARRAY):  # checked even when empty
            raise FormatError(w.path, f"{field}.item_type", f"unknown GGUF value type {itype}")
        if itype in sizes:
            w.take(count * sizes[itype], f"{field}[{count}]")
            return
        if count * 8 > w.remaining():  # every string or nested array takes at least 8 bytes
            raise FormatError(w.path, f"{field}.count", f"{count} items cannot fit in a {w.size}-byte file")
        if count > w.items_left:
            raise FormatError(w.path, f"{field}.count", f"{count:,} items: more than the {MAX_KV_ITEMS:,} strings "
                              "and arrays a GGUF's key/values may hold in all (vocabularies hold ~150–260 k tokens)")
        w.items_left -= count
        if itype == _STRING and _skip_strings(w, count):
            return
        for j in range(count):  # nested arrays, or strings that overrun: the error names the item
            _skip_value(w, itype, f"{field}[{j}]", depth + 1)
    elif vtype == _ARRAY:
        raise FormatError(w.path, f"{field}.type", f"arrays nested deeper than {depth} levels")
    else:
        raise FormatError(w.path, f"{field}.type", f"unknown GGUF value type {vtype}")


def _skip_strings(w: _Walker, count: int) -> bool:
    """Step over ``count`` length-prefixed strings (a vocabulary: 150k tokens and as many merges) at
    ~0.2 µs each, where the checked walk took ~1 µs; False, with nothing moved, if one would run past
    the end (the checked walk then names it)."""
    unpack, buf, pos = _U64[w.order].unpack_from, w.buf, w.pos
    try:
        for _ in itertools.repeat(None, count):
            pos += 8 + unpack(buf, pos)[0]
    except (struct.error, OverflowError):  # a length prefix past the end of the mapping (or of ssize_t)
        return False
    if pos > w.size:
        return False
    w.pos = pos
    return True


_U64 = {order: struct.Struct(order + "Q") for order in "<>"}


@functools.cache
def _record(order: str, n_dims: int) -> struct.Struct:
    """A tensor-info record after its name and n_dims: the dims, the ggml type, the offset."""
    return struct.Struct(order + "Q" * n_dims + "IQ")


def _walk_tensor_info(w: _Walker, i: int) -> tuple[str, int, int, str, tuple[int, ...]]:
    """One tensor-info record → (name, relative offset, nbytes, ggml type name, numpy-order shape)."""
    name = w.string(f"tensor[{i}].name")
    n_dims = w.uint(4, f"tensor '{name}'.n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise FormatError(w.path, f"tensor '{name}'.n_dims", f"{n_dims} dimensions (1..{MAX_DIMS} allowed)")
    record = _record(w.order, n_dims)
    if record.size <= w.remaining():  # all there: one unpack (the common case, ~3x faster)
        *dims, raw_type, offset = record.unpack_from(w.buf, w.take(record.size, "tensor info"))
        if max(dims) >= 1 << 63:
            raise FormatError(w.path, f"tensor '{name}'.dims", f"{max(dims)} exceeds int64 (dims {dims})")
    else:  # field by field, so that a truncation names the field it cut
        dims = [w.uint(8, f"tensor '{name}'.dims") for _ in range(n_dims)]
        if max(dims) >= 1 << 63:  # ggml's ne are int64; numpy cannot shape them either
            raise FormatError(w.path, f"tensor '{name}'.dims", f"{max(dims)} exceeds int64 (dims {dims})")
        raw_type = w.uint(4, f"tensor '{name}'.dtype")
        offset = w.uint(8, f"tensor '{name}'.offset")
    quant = w.tables.quants.get(raw_type)
    if quant is None:
        raise FormatError(w.path, f"tensor '{name}'.dtype", f"unknown ggml type {raw_type}")
    dtype, block, type_size = quant
    if dims[0] % block:
        raise FormatError(w.path, f"tensor '{name}'.dims",
                          f"row length {dims[0]} is not a multiple of the {block}-element block")
    n_elements = math.prod(dims)
    if not n_elements and math.prod(d or 1 for d in dims) * max(1, type_size // block) >= 1 << 63:
        # zero bytes, but a shape neither numpy (gguf-py's reader refused it) nor ggml's int64 can hold
        raise FormatError(w.path, f"tensor '{name}'.dims", f"{list(dims)}: the non-zero dimensions alone "
                                                           "exceed int64 bytes")
    return name, offset, n_elements // block * type_size, dtype, tuple(reversed(dims))


def _check_tensor_ranges(path: str, infos: list[tuple[str, int, int, str, tuple[int, ...]]], data_offset: int,
                         alignment: int, size: int) -> None:
    names: set[str] = set()
    prev = None
    for name, offset, nbytes, _, _ in sorted(infos, key=lambda x: (x[1], x[2])):
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
