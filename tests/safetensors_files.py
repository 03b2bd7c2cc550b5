"""safetensors files written by hand (no library writes its own input) in the dtypes real checkpoints
ship: an all-BF16 file shaped like a small LLM, and mixed-dtype files whose tensors sit back to back
with no padding, so most of them start at odd offsets. Content is random bytes (BOOL masked to 0/1);
verification compares bytes, so NaN patterns in float codes are fine.
"""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

from workbench.formats.safetensors import DTYPE_BITS

# (name, dtype code, shape): odd sizes, a scalar and an empty tensor among them.
BF16 = [("model.embed_tokens.weight", "BF16", (1000, 256)), ("odd", "BF16", (3, 5)),
        ("model.layers.0.mlp.up_proj.weight", "BF16", (512, 512)), ("scalar", "BF16", ()),
        ("empty", "BF16", (0, 8)), ("model.layers.1.self_attn.q_proj.weight", "BF16", (257, 129)),
        ("model.norm.weight", "BF16", (4096,))]
# Every code numpy can hold (BF16 with ml_dtypes): what every framework of every peer reads.
MIXED = [("a_u8", "U8", (7,)), ("b_f32", "F32", (33, 3)), ("c_bf16", "BF16", (5, 7)), ("d_i64", "I64", (9,)),
         ("e_bool", "BOOL", (3,)), ("f_f16", "F16", (17,)), ("g_f64", "F64", (4, 4)), ("h_i32", "I32", (11,)),
         ("i_u16", "U16", (5,)), ("j_i16", "I16", (3,)), ("l_u32", "U32", (1,)),
         ("m_u64", "U64", (2,)), ("n_i8", "I8", (9,)), ("o_bf16", "BF16", ()), ("p_f32", "F32", (1025,))]
# The codes numpy cannot hold (torch reads them), between others so their neighbours sit at odd offsets.
EXOTIC = [("a_u8", "U8", (3,)), ("b_f8e4m3", "F8_E4M3", (13,)), ("c_bf16", "BF16", (6,)),
          ("d_f8e5m2", "F8_E5M2", (7,)), ("e_f8e8m0", "F8_E8M0", (5,)), ("f_f32", "F32", (3,)),
          ("g_f4", "F4", (2, 6)), ("h_i64", "I64", (2,))]
# Codes some libraries have no entry for (fastsafetensors: C64 and the FNUZ pair; Run:ai: FNUZ).
RARE = [("a_c64", "C64", (3,)), ("b_u8", "U8", (1,)), ("c_f8fnuz", "F8_E4M3FNUZ", (9,)),
        ("d_f8e5fnuz", "F8_E5M2FNUZ", (5,)), ("e_f32", "F32", (2,))]
KINDS = {"bf16": BF16, "mixed": MIXED, "exotic": EXOTIC, "rare": RARE}


def nbytes(code: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * DTYPE_BITS[code] // 8


def write_file(path: str | os.PathLike[str], specs: list[tuple[str, str, tuple[int, ...]]], seed: int = 0) -> Path:
    """Header (padded to 8 bytes, as the format's writer does), then every tensor back to back."""
    rng = np.random.default_rng(seed)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, pos = [], 0
    for name, code, shape in specs:
        data = rng.integers(0, 256, nbytes(code, shape), dtype=np.uint8)
        if code == "BOOL":
            data &= 1
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [pos, pos + data.nbytes]}
        blobs.append(data.tobytes())
        pos += data.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    target = Path(path)
    with open(target, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
        fh.flush()
        os.fsync(fh.fileno())  # written back, so cold-cache states are reachable
    return target
