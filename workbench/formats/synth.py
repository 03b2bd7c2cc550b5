"""Synthetic model files: real GGUF / safetensors layouts with deterministic pseudo-random content.

Shapes follow real models. Dense (llama-like): token embedding, per layer attention q/k/v/o and an MLP
gate/up/down with their norms, a final norm and an output head. MoE (Qwen3-A3B-like): per layer
attention, a router, ``experts`` × gate/up/down (GGUF: stacked ``ffn_*_exps`` tensors; safetensors:
one tensor per expert, each projection's experts back to back, or gpt-oss style stacked
``experts.gate_up_proj`` / ``down_proj``), a shared expert and norms (see synth_experts.py). Every
expert is a whole number of pages, as in real quantized checkpoints.

GGUF uses the quant types real files use (Q4_0 for the big matrices, Q8_0 for embedding and head, F32
for norms and router), so at hidden size 2048 an expert slice is 2048 × 768 Q4_0 = 884736 B = 216
pages, and tensor offsets sit off page boundaries as in real files. The alignment decides the expert
blobs' remainder mod 64: every GGUF tensor is a whole number of 64-byte units, so all offsets share the
data region's remainder; at ``alignment >= 64`` that is 0 (copy-free O_DIRECT placement can engage),
and below 64 the header is padded so the data region starts an odd multiple of the alignment past a
64-byte boundary — the files whose experts would under-align the compute kernels, where placement
must decline. (A real file at the default 32 lands either way, depending on its header length.)
safetensors uses F16 matrices and F32 norms (dtypes numpy, and so the safetensors package, can read),
or with ``dtype="bf16"`` BF16 everywhere, as real checkpoints ship. ``shape="llama3-8b"`` takes a real
model's dimensions instead of the ladder (the layer count still fills the size).

Content: tensor ``i`` is PCG64 seeded by ``(seed, i)``, generated and written in 8 MiB chunks, so
memory stays bounded whatever the size. The top exponent bit of every float is cleared so every value
(and every quant block scale) is finite — byte comparisons via numpy never meet a NaN.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import BinaryIO, Iterator

import numpy as np

from workbench.errors import ParamError
from workbench.formats.index import TensorIndex
from workbench.formats.synth_layout import LAYOUTS, TensorSpec, plan_model

CHUNK_BYTES = 8 << 20
_KERNEL_ALIGNMENT = 64  # expert offsets below this alignment would under-align the compute kernels
FORMATS = ("gguf", "safetensors")
_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
          "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
# Bytes per quant block and where its float scales sit, to keep values finite (see _make_finite).
_BLOCK = {"Q4_0": 18, "Q8_0": 34, "F16": 2, "BF16": 2, "F32": 4, "U8": 1, "I8": 1}


def parse_size(text: str | int) -> int:
    """``"256MiB"`` → 268435456. Units B, KiB, MiB, GiB, TiB (1024) and KB, MB, GB, TB (1000)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if m is None or m.group(2).upper() not in _UNITS:
            raise ParamError("synth", "size", f"cannot parse {text!r} (e.g. 1048576, 64MiB, 2GiB, 500MB)")
        value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise ParamError("synth", "size", f"must be positive, got {text!r}")
    return value


def write_synthetic(path: str | os.PathLike[str], *, format: str, layout: str, size: int,
                    experts: int = 8, alignment: int = 32, seed: int = 0,
                    expert_layout: str | None = None, dtype: str = "f16",
                    shape: str | None = None) -> TensorIndex:
    """Write a synthetic model file of about ``size`` bytes and return its index.

    Parameters
    ----------
    path
        Output file; written as ``path + ".partial"`` and renamed when complete.
    format
        ``"gguf"`` or ``"safetensors"``.
    layout
        ``"dense"`` or ``"moe"``.
    size
        Target file size in bytes (the result is within a few percent; see :func:`parse_size`).
    experts
        Experts per MoE layer (ignored for dense).
    alignment
        GGUF ``general.alignment`` (power of two); for safetensors, the data region start is padded
        to it (tensors inside stay back to back, as the format requires).
    seed
        Content seed: the same seed gives a byte-identical file.
    expert_layout
        MoE safetensors only: ``"split"`` (default; one tensor per expert) or ``"stacked"`` (gpt-oss
        style, one tensor per layer and projection). GGUF experts are always stacked.
    dtype
        safetensors only: ``"f16"`` (F16 matrices, F32 norms) or ``"bf16"`` (every tensor BF16, as
        real checkpoints ship).
    shape
        ``None`` (dimensions from a ladder of real sizes) or a real dense model's dimensions by name
        (``"llama3-8b"``: hidden 4096, FFN 14336, vocabulary 128256); the layer count fills ``size``
        (8 GiB → 14 layers, 129 tensors, 8.21 GB).
    """
    _check_args(format, layout, size, experts, alignment, seed)
    specs, meta = plan_model(format, layout, size, experts, alignment, expert_layout, dtype, shape)
    path = os.fspath(path)
    tmp = path + ".partial"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # `synth data/models/m.gguf` in a fresh clone
        if format == "gguf":
            _write_gguf(tmp, specs, meta, alignment, seed)
        else:
            _write_safetensors(tmp, specs, meta, alignment, seed)
        os.replace(tmp, path)
    except OSError as exc:
        raise ParamError("synth", "out", f"{path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    from workbench.formats import open_index

    return open_index(path)


def _check_args(format: str, layout: str, size: int, experts: int, alignment: int, seed: int) -> None:
    if format not in FORMATS:
        raise ParamError("synth", "format", f"{format!r} is not one of {', '.join(FORMATS)}")
    if layout not in LAYOUTS:
        raise ParamError("synth", "layout", f"{layout!r} is not one of {', '.join(LAYOUTS)}")
    if size <= 0:
        raise ParamError("synth", "size", f"must be positive, got {size}")
    if experts < 1:
        raise ParamError("synth", "experts", f"must be >= 1, got {experts}")
    if alignment < 1 or alignment & (alignment - 1):
        raise ParamError("synth", "alignment", f"{alignment} is not a power of two")
    if not 0 <= seed < 2**63:
        raise ParamError("synth", "seed", f"must be in [0, 2**63), got {seed}")


def _write_gguf(path: str, specs: list[TensorSpec], meta: dict[str, int | str], alignment: int,
                seed: int) -> None:
    """gguf-py's writer for header, key/values and tensor infos; the data is streamed here."""
    header = _write_gguf_header(path, specs, meta, alignment, seed, pad=0)
    pad = (_data_remainder(alignment) - _round_up(header, alignment)) % _KERNEL_ALIGNMENT
    if pad:  # a multiple of the alignment, so the data region moves by exactly `pad`
        _write_gguf_header(path, specs, meta, alignment, seed, pad=pad)
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        _pad(f, alignment)
        for i, s in enumerate(specs):
            _write_content(f, s, seed, i)
            _pad(f, alignment)  # next tensor's offset, as gguf-py's writer lays them out


def _data_remainder(alignment: int) -> int:
    """Where the data region starts mod 64: 0 at alignment >= 64, else an odd multiple of the alignment."""
    return 0 if alignment >= _KERNEL_ALIGNMENT else alignment


def _write_gguf_header(path: str, specs: list[TensorSpec], meta: dict[str, int | str], alignment: int,
                       seed: int, pad: int) -> int:
    """Write header, key/values and tensor infos (truncating ``path``); returns their length in bytes."""
    from gguf import GGMLQuantizationType, GGUFWriter

    arch = str(meta["architecture"])
    writer = GGUFWriter(path, arch)
    writer.add_name(f"workbench synthetic {meta['layout']}")
    if alignment != 32:  # real files omit the key at the default; gguf-py then assumes 32
        writer.add_custom_alignment(alignment)
    for key, value in meta.items():
        if key.startswith(f"{arch}.") and isinstance(value, int):
            writer.add_uint32(key, value)
    writer.add_uint64("workbench.synth.seed", seed)
    writer.add_uint64("workbench.synth.size", int(meta["size"]))
    # moves the data region (see _data_remainder); never empty, as gguf-py drops empty strings
    writer.add_string("workbench.synth.pad", " " * (1 + pad))
    for s in specs:
        writer.add_tensor_info(s.name, s.shape, np.dtype(np.float32), s.nbytes,
                               raw_dtype=GGMLQuantizationType[s.dtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return os.path.getsize(path)


def _write_safetensors(path: str, specs: list[TensorSpec], meta: dict[str, int | str], alignment: int,
                       seed: int) -> None:
    header: dict[str, object] = {"__metadata__": {
        "format": "pt", "workbench.synth": json.dumps({**meta, "seed": seed}, sort_keys=True)}}
    pos = 0
    for s in specs:
        header[s.name] = {"dtype": s.dtype, "shape": list(s.shape), "data_offsets": [pos, pos + s.nbytes]}
        pos += s.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    # Pad with spaces (valid JSON whitespace, as the safetensors writer does) to align the data start.
    unit = max(8, alignment)
    raw += b" " * (-(8 + len(raw)) % unit)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        _write_tensors_parallel(f.fileno(), f.tell(), specs, seed)


def _write_tensors_parallel(fd: int, start: int, specs: list[TensorSpec], seed: int) -> None:
    """Each tensor at its offset from a small thread pool (the generator, the masking and pwrite all
    release the GIL): an 8 GB file in a few seconds instead of one core's ~1 GB/s. Same bytes."""
    from concurrent.futures import ThreadPoolExecutor

    offsets, pos = [], start
    for s in specs:
        offsets.append(pos)
        pos += s.nbytes
    os.ftruncate(fd, pos)

    def write_one(i: int) -> None:
        at = offsets[i]
        for chunk in _content_chunks(specs[i], seed, i):
            view, done = memoryview(chunk), 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], at + done)
            at += len(view)

    workers = max(1, min(8, len(os.sched_getaffinity(0)), len(specs)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(write_one, i) for i in sorted(range(len(specs)), key=lambda k: -specs[k].nbytes)]:
            future.result()  # the first error, after every write was started


def _round_up(x: int, n: int) -> int:
    return -(-x // n) * n


def _pad(f: BinaryIO, alignment: int) -> None:
    f.write(b"\0" * (-f.tell() % alignment))


def _write_content(f: BinaryIO, spec: TensorSpec, seed: int, index: int) -> None:
    """Stream the tensor's content to ``f`` at its position."""
    for chunk in _content_chunks(spec, seed, index):
        f.write(memoryview(chunk))


def _content_chunks(spec: TensorSpec, seed: int, index: int) -> Iterator[np.ndarray]:
    """``spec.nbytes`` pseudo-random bytes from PCG64(seed, index), chunk by chunk (bounded memory)."""
    bits = np.random.PCG64(np.random.SeedSequence([seed, index]))
    unit = math.lcm(8, _BLOCK[spec.dtype])  # whole blocks and whole 64-bit words per chunk
    chunk = max(unit, CHUNK_BYTES // unit * unit)
    left = spec.nbytes
    while left:
        n = min(chunk, left)
        buf = bits.random_raw(-(-n // 8)).view(np.uint8)[:n]
        _make_finite(buf, spec.dtype)
        yield buf
        left -= n


def _make_finite(buf: np.ndarray, dtype: str) -> None:
    """Clear the top exponent bit of every float (and quant block scale): no inf, no NaN, |x| < 2."""
    if dtype in ("F16", "BF16"):  # both keep the exponent's top bit at bit 14
        buf.view(np.uint16)[...] &= 0xBFFF
    elif dtype == "F32":
        buf.view(np.uint32)[...] &= 0xBFFFFFFF
    elif dtype in ("Q4_0", "Q8_0"):  # block = f16 scale, then the quants
        buf.reshape(-1, _BLOCK[dtype])[:, 1] &= 0xBF

