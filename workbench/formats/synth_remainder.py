"""Expert blobs at a chosen offset remainder, as the second write-up measured them.

On the measured model family (a GGUF at ``general.alignment`` 32) every expert blob's first byte lies
a constant 1152 bytes past a page boundary, and every expert is a whole number of pages, so every
expert of every blob shares that remainder. A synthetic file gets the same with ``expert_remainder``:
its data region starts on a page boundary and a zero-filled pad tensor (``workbench_pad.<n>``, I8 in
GGUF, U8 in safetensors; ``n`` is the number of the tensor it precedes) goes in front of each blob
that would otherwise start elsewhere. Pads are real tensors, not holes: GGUF readers (llama.cpp
checks that tensors follow each other) and safetensors readers (no gaps allowed) accept the file.
Pads are placed per file, so every shard of a set keeps the remainder too.
"""
from __future__ import annotations

from typing import Hashable, Sequence

from workbench.errors import ParamError
from workbench.formats.moe import match_expert_name, match_gguf_experts_name, match_stacked_name
from workbench.formats.synth_layout import TensorSpec

PAGE = 4096
PAD_PREFIX = "workbench_pad."
_PAD_DTYPE = {"gguf": "I8", "safetensors": "U8"}
_ST_ELEMENT = 8  # a safetensors remainder keeps every dtype up to 8-byte elements aligned


def check_remainder(fmt: str, layout: str, alignment: int, remainder: int | None) -> None:
    """ParamError unless ``remainder`` can be the first offset of every blob mod the page."""
    if remainder is None:
        return
    if layout != "moe":
        raise ParamError("synth", "expert_remainder", "applies to --layout moe (a dense model has no experts)")
    unit = alignment if fmt == "gguf" else _ST_ELEMENT
    if not 0 <= remainder < PAGE or remainder % unit:
        where = f"GGUF alignment {alignment}" if fmt == "gguf" else f"{_ST_ELEMENT} B (safetensors)"
        raise ParamError("synth", "expert_remainder", f"must be in [0, {PAGE}) and a multiple of the {where}, "
                                                      f"got {remainder}")


def with_remainder(fmt: str, numbered: Sequence[tuple[int, TensorSpec]], alignment: int,
                   remainder: int | None) -> list[tuple[int, TensorSpec]]:
    """One file's tensors with a pad in front of each blob start not at ``remainder`` mod the page,
    counted from a page-aligned data region (pads are numbered -1: zero content)."""
    if remainder is None:
        return list(numbered)
    step = alignment if fmt == "gguf" else 1  # GGUF pads every tensor to the alignment
    out: list[tuple[int, TensorSpec]] = []
    seen: set[Hashable] = set()
    pos = 0
    for i, spec in numbered:
        key = blob_key(fmt, spec.name)
        if key is not None and key not in seen:
            seen.add(key)
            gap = (remainder - pos) % PAGE
            if gap:
                out.append((-1, TensorSpec(f"{PAD_PREFIX}{i}", (gap,), _PAD_DTYPE[fmt], gap)))
                pos += -(-gap // step) * step
        out.append((i, spec))
        pos += -(-spec.nbytes // step) * step
    return out


def blob_key(fmt: str, name: str) -> Hashable | None:
    """Which expert blob a tensor belongs to — (layer, projection and suffix) — or None."""
    if fmt == "gguf":
        return match_gguf_experts_name(name)
    found = match_expert_name(name)
    if found is not None:
        layer, _expert, proj, suffix = found
        return (layer, proj + suffix)
    stacked = match_stacked_name(name)
    return None if stacked is None else (stacked[0], stacked[1] + stacked[2], "stacked")
