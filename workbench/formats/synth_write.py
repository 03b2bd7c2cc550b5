"""The bytes of synthetic model files: GGUF (header through gguf-py's writer) and safetensors, with
deterministic content — tensor ``i`` of a model is PCG64 seeded by ``(seed, i)`` whichever file of a
set it lands in, so a sharded model holds the same tensor bytes as the one-file model of the same plan.
"""
from __future__ import annotations

import json
import math
import os
from typing import BinaryIO, Iterator, Sequence

import numpy as np

from workbench.formats.synth_layout import TensorSpec
from workbench.output.origin import MARK

CHUNK_BYTES = 8 << 20
_KERNEL_ALIGNMENT = 64  # expert offsets below this alignment would under-align the compute kernels
_PAGE = 4096
# Bytes per quant block and where its float scales sit, to keep values finite (see _make_finite).
_BLOCK = {"Q4_0": 18, "Q8_0": 34, "F16": 2, "BF16": 2, "F32": 4, "U8": 1, "I8": 1}

Numbered = Sequence[tuple[int, TensorSpec]]  # (the tensor's number in the whole model, its spec)


def write_gguf(path: str, specs: Numbered, meta: dict[str, int | str], alignment: int, seed: int,
               split: tuple[int, int, int] | None = None) -> None:
    """gguf-py's writer for header, key/values and tensor infos; the data is streamed here.

    ``split``: (split.no, split.count, split.tensors.count) for one file of a gguf-split set; as
    llama.cpp's gguf-split does, only the first split carries the model's key/values.
    """
    header = _write_gguf_header(path, specs, meta, alignment, seed, 0, split)
    if _page_start(meta):  # the pads of synth_remainder count from a page-aligned data region
        pad = -_round_up(header, alignment) % _PAGE
    else:
        pad = (_data_remainder(alignment) - _round_up(header, alignment)) % _KERNEL_ALIGNMENT
    if pad:  # a multiple of the alignment, so the data region moves by exactly `pad`
        _write_gguf_header(path, specs, meta, alignment, seed, pad, split)
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        _pad(f, alignment)
        for i, s in specs:
            _write_content(f, s, seed, i)
            _pad(f, alignment)  # next tensor's offset, as gguf-py's writer lays them out


def _page_start(meta: dict[str, int | str]) -> bool:
    """Whether the data region must start on a page (a file with an expert remainder: synth_remainder)."""
    return meta.get("expert_remainder") is not None


def _data_remainder(alignment: int) -> int:
    """Where the data region starts mod 64: 0 at alignment >= 64, else an odd multiple of the alignment."""
    return 0 if alignment >= _KERNEL_ALIGNMENT else alignment


def _write_gguf_header(path: str, specs: Numbered, meta: dict[str, int | str], alignment: int,
                       seed: int, pad: int, split: tuple[int, int, int] | None) -> int:
    """Write header, key/values and tensor infos (truncating ``path``); returns their length in bytes."""
    from gguf import GGMLQuantizationType, GGUFWriter, Keys

    arch = str(meta["architecture"])
    writer = GGUFWriter(path, arch)
    if alignment != 32:  # real files omit the key at the default; gguf-py then assumes 32
        writer.add_custom_alignment(alignment)
    if split is None or split[0] == 0:
        writer.add_name(f"workbench synthetic {meta['layout']}")
        for key, value in meta.items():
            if key.startswith(f"{arch}.") and isinstance(value, int):
                writer.add_uint32(key, value)
        writer.add_uint64(f"{MARK}.seed", seed)
        writer.add_uint64(f"{MARK}.size", int(meta["size"]))
    if split is not None:
        writer.add_uint16(Keys.Split.LLM_KV_SPLIT_NO, split[0])
        writer.add_uint16(Keys.Split.LLM_KV_SPLIT_COUNT, split[1])
        writer.add_int32(Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, split[2])
    # moves the data region (see _data_remainder); never empty, as gguf-py drops empty strings
    writer.add_string(f"{MARK}.pad", " " * (1 + pad))  # every split: output/origin.py
    for _, s in specs:
        writer.add_tensor_info(s.name, s.shape, np.dtype(np.float32), s.nbytes,
                               raw_dtype=GGMLQuantizationType[s.dtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return os.path.getsize(path)


def write_safetensors(path: str, specs: Numbered, meta: dict[str, int | str], alignment: int,
                      seed: int) -> None:
    """One safetensors file holding ``specs`` back to back, the data region padded to ``alignment``."""
    header: dict[str, object] = {"__metadata__": {
        "format": "pt", MARK: json.dumps({**meta, "seed": seed}, sort_keys=True)}}
    pos = 0
    for _, s in specs:
        header[s.name] = {"dtype": s.dtype, "shape": list(s.shape), "data_offsets": [pos, pos + s.nbytes]}
        pos += s.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    # Pad with spaces (valid JSON whitespace, as the safetensors writer does) to align the data start.
    unit = _PAGE if _page_start(meta) else max(8, alignment)
    raw += b" " * (-(8 + len(raw)) % unit)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        _write_tensors_parallel(f.fileno(), f.tell(), specs, seed)


def _write_tensors_parallel(fd: int, start: int, specs: Numbered, seed: int) -> None:
    """Each tensor at its offset from a small thread pool (the generator, the masking and pwrite all
    release the GIL): an 8 GB file in a few seconds instead of one core's ~1 GB/s. Same bytes."""
    from concurrent.futures import ThreadPoolExecutor

    offsets, pos = [], start
    for _, s in specs:
        offsets.append(pos)
        pos += s.nbytes
    os.ftruncate(fd, pos)

    def write_one(k: int) -> None:
        at = offsets[k]
        for chunk in _content_chunks(specs[k][1], seed, specs[k][0]):
            view, done = memoryview(chunk), 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], at + done)
            at += len(view)

    workers = max(1, min(8, len(os.sched_getaffinity(0)), len(specs)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(write_one, k) for k in sorted(range(len(specs)), key=lambda k: -specs[k][1].nbytes)]:
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
    """``spec.nbytes`` pseudo-random bytes from PCG64(seed, index), chunk by chunk (bounded memory);
    zeros for ``index`` -1 (a pad, see synth_remainder)."""
    if index < 0:
        for at in range(0, spec.nbytes, CHUNK_BYTES):
            yield np.zeros(min(CHUNK_BYTES, spec.nbytes - at), dtype=np.uint8)
        return
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

