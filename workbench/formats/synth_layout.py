"""The shape plan of a synthetic model: which tensors, in file order, sized to a byte budget.

Hidden size comes from a ladder of real sizes (the largest that still leaves room for 8 layers),
then the layer count fills the budget and the vocabulary size (a multiple of 64, as real vocabularies
are padded) absorbs the remainder, so the file lands within 64 vocabulary rows (plus the header
estimate's error) of the target. Every GGUF row length (numpy's last dimension) is a multiple of 32,
the Q4_0/Q8_0 block, and every GGUF tensor is a whole number of 64-byte units, so tensor offsets keep
the data region's remainder mod 64 (see ``synth._write_gguf``).

MoE expert widths are rounded so one expert is a whole number of 4096-byte pages at every size, as in
real quantized checkpoints (A3B: 768 × 2048 at Q4_0 = 216 pages); see :func:`page_multiple_width`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.errors import ParamError
from workbench.formats.synth_dims import EXPERT_STRIDES, Dims
from workbench.formats.synth_experts import EXPERT_LAYOUTS, expert_roles

LAYOUTS = ("dense", "moe")
_LADDER = (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 5120, 8192)
_TARGET_LAYERS = 8
_MIN_VOCAB = 256
_VOCAB_UNIT = 64
_HEADER_PER_TENSOR = 160  # generous estimate of one tensor's header entry (GGUF info / JSON)
_HEADER_FIXED = 1024
_BLOCKS = {"Q4_0": (32, 18), "Q8_0": (32, 34), "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2)}
_DTYPES = {  # (format, dtype option) → dtype per kind of tensor
    ("gguf", "f16"): {"matrix": "Q4_0", "embed": "Q8_0", "norm": "F32", "router": "F32", "bias": "F32"},
    ("safetensors", "f16"): {"matrix": "F16", "embed": "F16", "norm": "F32", "router": "F32", "bias": "F16"},
    # as real bf16 checkpoints ship: every tensor bf16, norms included
    ("safetensors", "bf16"): {"matrix": "BF16", "embed": "BF16", "norm": "BF16", "router": "BF16", "bias": "BF16"},
}
DTYPES = ("f16", "bf16")
# Real models' dimensions, for files shaped like one: the layer count still fills the size.
SHAPES = {"llama3-8b": {"hidden": 4096, "ff": 14336, "vocab": 128256, "layers": 32},
          # k/v a quarter of the heads as every shape here (the real 70B: an eighth): 143.7 GB, not 141
          "llama3-70b": {"hidden": 8192, "ff": 28672, "vocab": 128256, "layers": 80}}
_ARCH = {"dense": "llama", "moe": "qwen2moe"}


@dataclass(frozen=True)
class TensorSpec:
    """One tensor to write: numpy-order shape, dtype name of the target format, bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def plan_model(fmt: str, layout: str, size: int | None, experts: int, alignment: int,
               expert_layout: str | None = None, dtype: str = "f16", shape: str | None = None,
               expert_stride: str = "page") -> tuple[list[TensorSpec], dict[str, int | str]]:
    """Tensor specs in file order and the metadata describing them, for a file of about ``size``.

    ``expert_layout``: GGUF experts are always ``"stacked"``; safetensors defaults to ``"split"``
    (one tensor per expert) and takes ``"stacked"`` (gpt-oss style, one tensor per layer).
    ``dtype``: safetensors ``"f16"`` (F16 matrices, F32 norms) or ``"bf16"`` (every tensor BF16).
    ``shape``: a name from :data:`SHAPES` fixes hidden, FFN and vocabulary sizes to a real model's
    (dense only); the layer count fills the size, or with ``size=None`` is the real model's (its full
    dimensions: llama3-8b is 32 layers, 16.06 GB in bf16).
    ``expert_stride``: ``"page"`` (every expert a whole number of pages, as real quantized checkpoints)
    or ``"odd"`` (none is: the tiny-model case, where in-place placement must stay INERT).
    """
    dtypes = _check_dtype_shape(fmt, layout, dtype, shape)
    if expert_stride not in EXPERT_STRIDES:
        raise ParamError("synth", "expert_stride", f"{expert_stride!r} is not one of {', '.join(EXPERT_STRIDES)}")
    if size is None:
        if shape is None:
            raise ParamError("synth", "size", "needed unless --shape names a real model")
        return _plan_real(fmt, layout, experts, expert_layout, dtype, shape, dtypes)
    align = alignment if fmt == "gguf" else 1  # safetensors packs tensors back to back
    proto = Dims(0, 1, 1, experts, dtypes["matrix"], _expert_layout(fmt, expert_layout),
                 expert_stride=expert_stride if layout == "moe" else "page")
    if shape is None:
        proto = replace(proto, hidden=_pick_hidden(fmt, layout, size, proto, align, dtypes))
    else:
        real = SHAPES[shape]
        proto = replace(proto, hidden=real["hidden"], ff_dim=real["ff"], vocab=real["vocab"])
    per_layer, row, fixed = _costs(fmt, layout, proto, align, dtypes)
    vocab_floor = _MIN_VOCAB if shape is None else proto.vocab
    layers = (size - fixed - vocab_floor * row) // per_layer
    if layers < 1:
        need = fixed + vocab_floor * row + per_layer
        what = f"{shape}-shaped" if shape else f"{layout} {fmt}"
        raise ParamError("synth", "size", f"{size} bytes is too small for a {what} model with "
                                          f"these settings (at least {need} bytes)")
    vocab = proto.vocab if shape else max(
        _MIN_VOCAB, (size - fixed - layers * per_layer) // row // _VOCAB_UNIT * _VOCAB_UNIT)
    dims = replace(proto, layers=layers, vocab=vocab)
    meta = _metadata(layout, dims, size)
    meta.update({"dtype": dtype, **({"shape": shape} if shape else {})})
    if layout == "moe":
        meta["expert_stride"] = expert_stride
    return model_specs(fmt, layout, dims, dtypes), meta


def _plan_real(fmt: str, layout: str, experts: int, expert_layout: str | None, dtype: str, shape: str,
               dtypes: dict[str, str]) -> tuple[list[TensorSpec], dict[str, int | str]]:
    """A real model's full dimensions, layer count included."""
    real = SHAPES[shape]
    dims = Dims(real["hidden"], real["layers"], real["vocab"], experts, dtypes["matrix"],
                _expert_layout(fmt, expert_layout), ff_dim=real["ff"])
    specs = model_specs(fmt, layout, dims, dtypes)
    meta = _metadata(layout, dims, sum(s.nbytes for s in specs))
    meta.update({"dtype": dtype, "shape": shape})
    return specs, meta


def _check_dtype_shape(fmt: str, layout: str, dtype: str, shape: str | None) -> dict[str, str]:
    if (fmt, dtype) not in _DTYPES:
        why = (f"one of {', '.join(DTYPES)}" if dtype not in DTYPES else
               "GGUF files use their quant mix (Q4_0/Q8_0/F32); the dtype applies to safetensors")
        raise ParamError("synth", "dtype", f"{dtype!r}: {why}")
    if shape is not None and shape not in SHAPES:
        raise ParamError("synth", "shape", f"{shape!r} is not one of {', '.join(SHAPES)}")
    if shape is not None and layout != "dense":
        raise ParamError("synth", "shape", f"{shape!r} is a dense model's shape, not a {layout} one")
    return _DTYPES[(fmt, dtype)]


def _expert_layout(fmt: str, expert_layout: str | None) -> str:
    if expert_layout is None:
        return "stacked" if fmt == "gguf" else "split"
    if expert_layout not in EXPERT_LAYOUTS:
        raise ParamError("synth", "expert_layout", f"{expert_layout!r} is not one of {', '.join(EXPERT_LAYOUTS)}")
    if fmt == "gguf" and expert_layout != "stacked":
        raise ParamError("synth", "expert_layout", "GGUF stores experts stacked (ffn_*_exps); 'split' is "
                                                   "a safetensors layout")
    return expert_layout


def model_specs(fmt: str, layout: str, dims: Dims, dtypes: dict[str, str] | None = None) -> list[TensorSpec]:
    """Every tensor of the model, in the order it is written."""
    names = _GGUF_NAMES if fmt == "gguf" else _ST_NAMES
    entries = [(names["embed"], "embed", (dims.vocab, dims.hidden))]
    for layer in range(dims.layers):
        entries += _layer_roles(fmt, layout, dims, names, layer)
    entries += [(names["norm"], "norm", (dims.hidden,)), (names["head"], "embed", (dims.vocab, dims.hidden))]
    dt = dtypes or _DTYPES[(fmt, "f16")]
    return [TensorSpec(name, shape, dt[kind], _nbytes(dt[kind], shape)) for name, kind, shape in entries]


def _layer_roles(fmt: str, layout: str, d: Dims, names: dict[str, str],
                 layer: int) -> list[tuple[str, str, tuple]]:
    """(name, dtype kind, shape) of one layer's tensors; names already carry the layer number."""
    h = d.hidden

    def n(role: str) -> str:
        return names[role].format(L=layer)

    roles = [(n("attn_norm"), "norm", (h,)), (n("q"), "matrix", (h, h)), (n("k"), "matrix", (d.kv, h)),
             (n("v"), "matrix", (d.kv, h)), (n("o"), "matrix", (h, h)), (n("ffn_norm"), "norm", (h,))]
    if layout == "dense":
        return roles + [(n("gate"), "matrix", (d.ff, h)), (n("up"), "matrix", (d.ff, h)),
                        (n("down"), "matrix", (h, d.ff))]
    roles += expert_roles(fmt, d, layer)
    if fmt == "safetensors" and d.expert_layout == "stacked":
        return roles  # gpt-oss has no shared expert
    fs = d.shared_ff
    return roles + [(n("shexp_gate_inp"), "router", (1, h)), (n("gate_shexp"), "matrix", (fs, h)),
                    (n("up_shexp"), "matrix", (fs, h)), (n("down_shexp"), "matrix", (h, fs))]


def _pick_hidden(fmt: str, layout: str, size: int, proto: Dims, align: int, dtypes: dict[str, str]) -> int:
    """The largest ladder hidden size that leaves room for the target layer count."""
    best = _LADDER[0]
    for hidden in _LADDER:
        try:
            per_layer, row, fixed = _costs(fmt, layout, replace(proto, hidden=hidden), align, dtypes)
        except ValueError:  # expert_stride="odd": no expert width of this hidden size is off the pages
            continue
        if fixed + _MIN_VOCAB * row + _TARGET_LAYERS * per_layer <= size:
            best = hidden
    return best


def _costs(fmt: str, layout: str, one: Dims, align: int, dt: dict[str, str]) -> tuple[int, int, int]:
    """(bytes per layer, bytes per vocabulary row, fixed bytes) including padding and header."""
    names = _GGUF_NAMES if fmt == "gguf" else _ST_NAMES
    layer = _layer_roles(fmt, layout, one, names, 0)
    hidden = one.hidden
    per_layer = sum(_round_up(_nbytes(dt[k], s), align) + _HEADER_PER_TENSOR for _, k, s in layer)
    row = 2 * _nbytes(dt["embed"], (1, hidden))
    fixed = _HEADER_FIXED + 3 * (align + _HEADER_PER_TENSOR) + _nbytes(dt["norm"], (hidden,)) + align
    return per_layer, row, fixed


def _metadata(layout: str, d: Dims, size: int) -> dict[str, int | str]:
    arch = _ARCH[layout]
    meta: dict[str, int | str] = {
        "architecture": arch, "layout": layout, "size": size,
        f"{arch}.block_count": d.layers, f"{arch}.context_length": 4096,
        f"{arch}.embedding_length": d.hidden, f"{arch}.feed_forward_length": d.ff,
        f"{arch}.attention.head_count": d.hidden // d.head_dim,
        f"{arch}.attention.head_count_kv": d.kv // d.head_dim, f"{arch}.vocab_size": d.vocab,
    }
    if layout == "moe":
        meta.update({f"{arch}.expert_count": d.experts, f"{arch}.expert_used_count": min(8, d.experts),
                     f"{arch}.expert_feed_forward_length": d.expert_ff,
                     f"{arch}.expert_shared_feed_forward_length": d.shared_ff,
                     "expert_layout": d.expert_layout})
    return meta


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    block, type_size = _BLOCKS[dtype]
    n = 1
    for s in shape:
        n *= s
    return n // block * type_size


def _round_up(x: int, n: int) -> int:
    return -(-x // n) * n


_GGUF_NAMES = {
    "embed": "token_embd.weight", "norm": "output_norm.weight", "head": "output.weight",
    "attn_norm": "blk.{L}.attn_norm.weight", "q": "blk.{L}.attn_q.weight", "k": "blk.{L}.attn_k.weight",
    "v": "blk.{L}.attn_v.weight", "o": "blk.{L}.attn_output.weight", "ffn_norm": "blk.{L}.ffn_norm.weight",
    "gate": "blk.{L}.ffn_gate.weight", "up": "blk.{L}.ffn_up.weight", "down": "blk.{L}.ffn_down.weight",
    "shexp_gate_inp": "blk.{L}.ffn_gate_inp_shexp.weight", "gate_shexp": "blk.{L}.ffn_gate_shexp.weight",
    "up_shexp": "blk.{L}.ffn_up_shexp.weight", "down_shexp": "blk.{L}.ffn_down_shexp.weight",
}
_ST_NAMES = {
    "embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "head": "lm_head.weight",
    "attn_norm": "model.layers.{L}.input_layernorm.weight", "q": "model.layers.{L}.self_attn.q_proj.weight",
    "k": "model.layers.{L}.self_attn.k_proj.weight", "v": "model.layers.{L}.self_attn.v_proj.weight",
    "o": "model.layers.{L}.self_attn.o_proj.weight",
    "ffn_norm": "model.layers.{L}.post_attention_layernorm.weight",
    "gate": "model.layers.{L}.mlp.gate_proj.weight", "up": "model.layers.{L}.mlp.up_proj.weight",
    "down": "model.layers.{L}.mlp.down_proj.weight",
    "shexp_gate_inp": "model.layers.{L}.mlp.shared_expert_gate.weight",
    "gate_shexp": "model.layers.{L}.mlp.shared_expert.gate_proj.weight",
    "up_shexp": "model.layers.{L}.mlp.shared_expert.up_proj.weight",
    "down_shexp": "model.layers.{L}.mlp.shared_expert.down_proj.weight",
}
