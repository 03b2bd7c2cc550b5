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

import os
import re
from fractions import Fraction

from workbench.errors import ParamError
from workbench.formats.index import TensorIndex
from workbench.formats.synth_layout import LAYOUTS, plan_model
from workbench.formats.synth_remainder import check_remainder, with_remainder
from workbench.formats.synth_shards import write_set
from workbench.formats.synth_write import CHUNK_BYTES, _write_content, write_gguf, write_safetensors
from workbench.output.outdir import OutDir
from workbench.output.files import refuse_overwrite

__all__ = ["CHUNK_BYTES", "FORMATS", "_write_content", "parse_size", "write_synthetic"]
FORMATS = ("gguf", "safetensors")
_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
          "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
MAX_SIZE = 2**50  # 1 PiB: a size past it is a typo, not a model
MAX_EXPERTS = 4_096  # experts per layer (the largest public MoE models have 384)
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """``"256MiB"`` → 268435456. Units B, KiB, MiB, GiB, TiB (1024) and KB, MB, GB, TB (1000)."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text)) if len(str(text)) <= 64 else None  # 1 PiB takes 16 digits
        if m is None or m.group(2).upper() not in _UNITS:
            raise ParamError("synth", "size", f"cannot parse {_short(text)} (e.g. 1048576, 64MiB, 2GiB, 500MB)")
        value = int(Fraction(m.group(1)) * _UNITS[m.group(2).upper()])  # exact: float() of 400 digits is inf
    if value <= 0:
        raise ParamError("synth", "size", f"must be positive, got {text!r}")
    if value > MAX_SIZE:
        raise ParamError("synth", "size", f"{_short(text)} is more than {MAX_SIZE // 2**50} PiB")
    return value


def _short(text: object) -> str:
    text = repr(text)
    return text if len(text) <= 40 else f"{text[:39]}… ({len(text):,} characters)"


def write_synthetic(path: str | os.PathLike[str], *, format: str, layout: str, size: int | None,
                    experts: int = 8, alignment: int = 32, seed: int = 0,
                    expert_layout: str | None = None, dtype: str = "f16",
                    shape: str | None = None, shards: int = 1,
                    max_shard_size: int | None = None, expert_remainder: int | None = None,
                    expert_stride: str = "page", force: bool = False, ours_only: bool = False) -> TensorIndex:
    """Write a synthetic model of about ``size`` bytes — one file, or a sharded set — and return its index.

    Parameters
    ----------
    path
        Output file; written to a new ``.<name>.<random>.partial`` file beside it and renamed when complete. For a sharded model
        (``shards`` > 1 or ``max_shard_size``), a directory to hold ``model-0000i-of-0000N.<ext>``, or a
        file name whose stem names the shards (``dir/x.gguf`` → ``dir/x-00001-of-00003.gguf``).
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
        (8 GiB → 14 layers, 129 tensors, 8.21 GB); with ``size=None`` the real model whole.
    shards, max_shard_size
        Write the tensors over ``shards`` files (balanced by bytes; an expert group never split), or
        start a new file whenever the next tensor would pass ``max_shard_size`` bytes (as
        ``save_pretrained`` and gguf-split do). safetensors sets get ``model.safetensors.index.json``
        with Hugging Face's file names and ``metadata.total_size``; GGUF sets ``split.*`` keys.
    expert_remainder
        MoE only: every expert blob's first byte lands this many bytes past a page boundary (the
        second write-up's 1152 at alignment 32), in every file of a set: the data region starts on a
        page and zero pad tensors (``workbench_pad.<n>``) go in front of blobs (synth_remainder.py).
        None: where the layout puts them (0 mod 64 at alignment >= 64, else an odd multiple of it).
    expert_stride
        MoE only: ``"page"`` (every expert a whole number of pages) or ``"odd"`` (none is, as in a tiny
        test model: the experts of a blob sit at different remainders and placement declines).
    force
        Replace an existing model or ledger file at an output path; ``False`` (the default) refuses it
        in one line before anything is written. Each file is written to a new file beside it and
        renamed over it when complete; a set's directory is never reached through a link
        (:mod:`workbench.output.outdir`).
    ours_only
        An implicit rewrite (the demo re-making a broken model): replace only files the workbench wrote
        itself (:mod:`workbench.output.origin`), whatever ``force`` says.
    """
    _check_args(format, layout, size, experts, alignment, seed)
    check_remainder(format, layout, alignment, expert_remainder)
    specs, meta = plan_model(format, layout, size, experts, alignment, expert_layout, dtype, shape, expert_stride)
    if expert_remainder is not None:
        meta["expert_remainder"] = expert_remainder
    if shards != 1 or max_shard_size is not None:
        return write_set(path, format, specs, meta, alignment, seed, shards, max_shard_size, expert_remainder,
                         force, ours_only)
    path = os.fspath(path)
    refuse_overwrite(path, force=force, ours_only=ours_only)
    numbered = with_remainder(format, list(enumerate(specs)), alignment, expert_remainder)
    with OutDir.open(os.path.dirname(path) or ".") as directory:  # `synth data/models/m.gguf` in a fresh clone
        directory.write(os.path.basename(path), lambda _fd, tmp: (
            write_gguf(tmp, numbered, meta, alignment, seed) if format == "gguf"
            else write_safetensors(tmp, numbered, meta, alignment, seed)))
    from workbench.formats import open_index

    return open_index(path)


def _check_args(format: str, layout: str, size: int, experts: int, alignment: int, seed: int) -> None:
    if format not in FORMATS:
        raise ParamError("synth", "format", f"{format!r} is not one of {', '.join(FORMATS)}")
    if layout not in LAYOUTS:
        raise ParamError("synth", "layout", f"{layout!r} is not one of {', '.join(LAYOUTS)}")
    if size is not None and size <= 0:
        raise ParamError("synth", "size", f"must be positive, got {size}")
    if not 1 <= experts <= MAX_EXPERTS:
        raise ParamError("synth", "experts", f"must be in [1, {MAX_EXPERTS}], got {experts}")
    if alignment < 1 or alignment & (alignment - 1):
        raise ParamError("synth", "alignment", f"{alignment} is not a power of two")
    if not 0 <= seed < 2**63:
        raise ParamError("synth", "seed", f"must be in [0, 2**63), got {seed}")
