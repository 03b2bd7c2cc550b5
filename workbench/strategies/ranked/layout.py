"""Which bytes of a checkpoint each rank holds: tensor-parallel (vLLM's rule) and expert-parallel.

Tensor-parallel, as vLLM's ``ColumnParallelLinear`` / ``RowParallelLinear`` / ``VocabParallelEmbedding``
shard a Llama-style checkpoint (weights are [out, in]; a stacked expert tensor [E, out, in]):

- column-parallel, split on the output dim (-2; a 1-D bias on 0): q/k/v, gate/up (and each expert's);
- row-parallel, split on the input dim (-1): o, down (and each expert's); their biases are replicated;
- vocab-parallel, split on dim 0: embed_tokens / lm_head (GGUF token_embd / output), the vocabulary
  padded to a multiple of 64 and then divided evenly, the rows past the vocabulary zero on the last
  ranks — vLLM's padding, so every rank holds the same shape;
- everything else replicated on every rank: norms, the router, row-parallel biases.

A linear dim that does not divide by the rank count is refused (vLLM asserts it: ``divide()``), and so
is a fused tensor (qkv_proj, gate_up_proj) whose parts the file does not delimit.

Expert-parallel: each MoE layer's experts split by index range as vLLM's ``determine_expert_map``:
E // W each, the first E % W ranks one more; a stacked tensor is split on its expert dim 0, a
per-expert tensor goes whole to the rank holding its expert; every other tensor is replicated.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from workbench.errors import ParamError
from workbench.formats.index import TensorIndex, TensorInfo

LAYOUTS = ("tp", "ep")
VOCAB_PAD = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE

_COLUMN = re.compile(r"(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj|w1|w3|attn_q|attn_k|attn_v|ffn_gate|ffn_up|"
                     r"ffn_gate_exps|ffn_up_exps|ffn_gate_shexp|ffn_up_shexp)\.(weight|bias)$")
_ROW = re.compile(r"(^|\.)(o_proj|down_proj|w2|attn_output|ffn_down|ffn_down_exps|ffn_down_shexp)\.weight$")
_VOCAB = re.compile(r"(^|\.)(embed_tokens|lm_head|token_embd|output)\.weight$")
_FUSED = re.compile(r"(^|\.)(qkv_proj|gate_up_proj|attn_qkv|W_pack|query_key_value)\.(weight|bias)$")

_ELEM = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
         "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class RankSlice:
    """One tensor's part on one rank: ``ranges`` (file offset, nbytes) in order fill the first
    ``data_bytes`` of a buffer of ``nbytes`` (the rest is padding, zero)."""

    tensor: str
    file: str
    ranges: tuple[tuple[int, int], ...]
    nbytes: int
    rule: str  # column | row | vocab | expert | replicated

    @property
    def data_bytes(self) -> int:
        return sum(n for _, n in self.ranges)


@dataclass(frozen=True)
class RankPlan:
    """What one rank holds, tensor by tensor (file order)."""

    layout: str
    rank: int
    world: int
    slices: tuple[RankSlice, ...]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.slices)

    @property
    def data_bytes(self) -> int:
        return sum(s.data_bytes for s in self.slices)


def plan_rank(index: TensorIndex, layout: str, rank: int, world: int) -> RankPlan:
    """The slices rank ``rank`` of ``world`` holds under ``layout``; ParamError (one line, naming the model
    and the tensor) where the rule cannot cut a tensor."""
    if layout not in LAYOUTS:
        raise ParamError("--layout", layout, f"one of {', '.join(LAYOUTS)}")
    if not 0 <= rank < world:
        raise ParamError("--ranks", str(world), f"rank {rank} outside 0..{world - 1}")
    experts = _expert_tensors(index) if layout == "ep" else {}
    if layout == "ep" and not experts:
        raise ParamError("--layout", "ep", f"{index.path}: no expert tensors (a dense model): use --layout tp")
    slices = []
    for t in index.sorted_by_offset():
        got = _tp_slice(index, t, rank, world) if layout == "tp" else _ep_slice(t, experts.get(t.name), rank, world)
        if got is not None:
            slices.append(got)
    return RankPlan(layout, rank, world, tuple(slices))


def expert_range(n_experts: int, rank: int, world: int) -> tuple[int, int]:
    """vLLM's expert map: E // W experts each, the first E % W ranks one more."""
    base, extra = divmod(n_experts, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _expert_tensors(index: TensorIndex) -> dict[str, tuple[int, int]]:
    """Expert tensor name → (expert it holds or -1 for a stacked one, experts in its layer)."""
    out: dict[str, tuple[int, int]] = {}
    for blob in index.blobs:
        if len(blob.tensors) == 1:
            out[blob.tensors[0]] = (-1, blob.n_experts)
        else:
            out.update({name: (e, blob.n_experts) for e, name in enumerate(blob.tensors)})
    return out


def _ep_slice(t: TensorInfo, expert: tuple[int, int] | None, rank: int, world: int) -> RankSlice | None:
    if expert is None:
        return RankSlice(t.name, t.file, ((t.offset, t.nbytes),), t.nbytes, "replicated")
    which, n_experts = expert
    lo, hi = expert_range(n_experts, rank, world)
    if which >= 0:
        return RankSlice(t.name, t.file, ((t.offset, t.nbytes),), t.nbytes, "expert") if lo <= which < hi else None
    if hi == lo:
        return None
    ranges = split_ranges(t, 0, lo, hi)
    return RankSlice(t.name, t.file, ranges, sum(n for _, n in ranges), "expert")


def _tp_slice(index: TensorIndex, t: TensorInfo, rank: int, world: int) -> RankSlice:
    whole = RankSlice(t.name, t.file, ((t.offset, t.nbytes),), t.nbytes, "replicated")
    if _FUSED.search(t.name) and world > 1:
        raise ParamError("--layout", "tp", f"{index.path}: {t.name} is fused ({t.shape}): its parts are not "
                                           "delimited in the file, so this workbench does not cut it")
    if _VOCAB.search(t.name) and len(t.shape) == 2:
        return _vocab_slice(t, rank, world)
    if _COLUMN.search(t.name):
        dim, rule = (len(t.shape) - 2 if len(t.shape) >= 2 else 0), "column"
    elif _ROW.search(t.name) and len(t.shape) >= 2:
        dim, rule = len(t.shape) - 1, "row"
    else:
        return whole
    size = t.shape[dim]
    if size % world:
        raise ParamError("--ranks", str(world), f"{index.path}: {t.name} {t.shape}: dim {dim} ({size}) does not "
                                                f"divide by {world} ranks ({rule}-parallel; vLLM refuses it too)")
    part = size // world
    ranges = split_ranges(t, dim, rank * part, (rank + 1) * part)
    return RankSlice(t.name, t.file, ranges, sum(n for _, n in ranges), rule)


def _vocab_slice(t: TensorInfo, rank: int, world: int) -> RankSlice:
    vocab, row = t.shape[0], t.nbytes // t.shape[0]
    per_rank = -(-(-(-vocab // VOCAB_PAD) * VOCAB_PAD) // world)
    lo, hi = min(vocab, rank * per_rank), min(vocab, (rank + 1) * per_rank)
    ranges = ((t.offset + lo * row, (hi - lo) * row),) if hi > lo else ()
    return RankSlice(t.name, t.file, ranges, per_rank * row, "vocab")


def split_ranges(t: TensorInfo, dim: int, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """File byte ranges of ``t[..., lo:hi, ...]`` (on ``dim``), in order; coalesced where adjacent."""
    shape = t.shape
    outer = math.prod(shape[:dim])
    if dim == len(shape) - 1:  # the innermost dim: cut inside each row, in whole quantization blocks
        block, block_bytes = _block(t)
        if lo % block or hi % block:
            raise ParamError("--layout", "tp", f"{t.file}: {t.name} {t.dtype} {shape}: cutting dim {dim} at {lo}:{hi} "
                                               f"splits {block}-element blocks")
        row = t.nbytes // outer
        first, n = lo // block * block_bytes, (hi - lo) // block * block_bytes
        starts = [t.offset + i * row + first for i in range(outer)]
    else:
        inner = t.nbytes // (outer * shape[dim])  # bytes of one index on ``dim``
        starts = [t.offset + (i * shape[dim] + lo) * inner for i in range(outer)]
        n = (hi - lo) * inner
    out: list[tuple[int, int]] = []
    for start in starts:
        if out and out[-1][0] + out[-1][1] == start:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((start, n))
    return tuple(out)


def _block(t: TensorInfo) -> tuple[int, int]:
    """(elements, bytes) of the dtype's unit: one element, or one GGUF quantization block."""
    if t.dtype.upper() in _ELEM:
        return 1, _ELEM[t.dtype.upper()]
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType[t.dtype.upper()]]
    except KeyError:
        raise ParamError("--layout", "tp", f"{t.name}: dtype {t.dtype} has no known element size") from None
