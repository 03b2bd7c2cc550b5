"""The expert tensors of one synthetic MoE layer, in the three layouts real checkpoints use.

* GGUF (llama.cpp): ``blk.N.ffn_{gate,up,down}_exps.weight``, experts stacked along the first
  numpy dimension, plus the router ``ffn_gate_inp``.
* safetensors ``split`` (Qwen/Mixtral exports): one tensor per expert and projection,
  ``model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight``, each projection's experts back to back.
* safetensors ``stacked`` (gpt-oss): one tensor per layer and projection holding every expert,
  ``model.layers.N.mlp.experts.gate_up_proj`` ``(E, hidden, 2·ff)`` and ``down_proj`` ``(E, ff, hidden)``
  with their ``_bias`` companions, and a ``router`` with weight and bias.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.formats.synth_layout import Dims

EXPERT_LAYOUTS = ("stacked", "split")
PAGE = 4096
_ROW_BLOCK = 32  # a GGUF row (numpy's last dimension) must hold whole Q4_0/Q8_0 blocks
_BYTES = {"Q4_0": (32, 18), "Q8_0": (32, 34), "F16": (1, 2), "F32": (1, 4)}  # (elements, bytes) per block


def page_multiple_width(hidden: int, dtype: str) -> int:
    """The smallest FFN width ``w`` (a multiple of 32) for which a ``w × hidden`` matrix of ``dtype``
    is a whole number of pages: every FFN width that is a multiple of it gives page-multiple experts.

    At Q4_0 (18 B per 32 elements) that needs ``w · hidden`` to be a multiple of 65536, so hidden 2048
    gives 32 (the A3B's 768 is 216 pages) and hidden 64 gives 1024 (9 pages).
    """
    elements, nbytes = _BYTES[dtype]
    width = _ROW_BLOCK
    while (width * hidden // elements * nbytes) % PAGE:
        width += _ROW_BLOCK  # terminates: width = 32 · 4096 always gives a page multiple
    return width


def expert_roles(fmt: str, d: "Dims", layer: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype kind, numpy shape) of layer ``layer``'s router and expert tensors, in file order."""
    h, fe, e = d.hidden, d.expert_ff, d.experts
    if fmt == "gguf":
        return [(f"blk.{layer}.ffn_gate_inp.weight", "router", (e, h)),
                (f"blk.{layer}.ffn_gate_exps.weight", "matrix", (e, fe, h)),
                (f"blk.{layer}.ffn_up_exps.weight", "matrix", (e, fe, h)),
                (f"blk.{layer}.ffn_down_exps.weight", "matrix", (e, h, fe))]
    base = f"model.layers.{layer}.mlp"
    if d.expert_layout == "stacked":
        return [(f"{base}.router.weight", "router", (e, h)), (f"{base}.router.bias", "router", (e,)),
                (f"{base}.experts.gate_up_proj", "matrix", (e, h, 2 * fe)),
                (f"{base}.experts.gate_up_proj_bias", "bias", (e, 2 * fe)),
                (f"{base}.experts.down_proj", "matrix", (e, fe, h)),
                (f"{base}.experts.down_proj_bias", "bias", (e, h))]
    roles = [(f"{base}.gate.weight", "router", (e, h))]
    for proj, shape in (("gate", (fe, h)), ("up", (fe, h)), ("down", (h, fe))):
        roles += [(f"{base}.experts.{x}.{proj}_proj.weight", "matrix", shape) for x in range(e)]
    return roles
