"""Hand-built GGUF and safetensors bytes for the formats tests (valid or broken on purpose)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

UINT32, STRING, ARRAY, UINT8 = 4, 8, 9, 0


def gguf_string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_kv_u32(key: str, value: int) -> bytes:
    return gguf_string(key) + struct.pack("<II", UINT32, value)


def gguf_tensor_info(name: str, dims: list[int], ggml_type: int, offset: int, n_dims: int | None = None) -> bytes:
    """``dims`` in ggml order (ne0 first); ``n_dims`` overrides the declared count."""
    out = gguf_string(name) + struct.pack("<I", len(dims) if n_dims is None else n_dims)
    out += b"".join(struct.pack("<Q", d) for d in dims)
    return out + struct.pack("<IQ", ggml_type, offset)


def gguf_bytes(kvs: list[bytes], infos: list[bytes], data: bytes, *, alignment: int = 32,
               n_tensors: int | None = None, n_kv: int | None = None, magic: bytes = b"GGUF") -> bytes:
    """A GGUF v3 file: header, key/values, tensor infos, padding to ``alignment``, then ``data``."""
    head = magic + struct.pack("<IQQ", 3, len(infos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % alignment)
    return head + data


def write_gguf(path: Path, **kw) -> Path:
    """A small valid GGUF: two F32 tensors ``a`` (8 floats) and ``b`` (16 floats), overridable."""
    kvs = kw.pop("kvs", [gguf_kv_u32("general.alignment", 32)])
    infos = kw.pop("infos", [gguf_tensor_info("a", [8], 0, 0), gguf_tensor_info("b", [16], 0, 32)])
    data = kw.pop("data", bytes(range(96)))
    path.write_bytes(gguf_bytes(kvs, infos, data, **kw))
    return path


def write_safetensors(path: Path, header: dict, data: bytes, *, length: int | None = None) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def st_entry(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
