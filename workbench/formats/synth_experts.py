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

from workbench.formats.synth_dims import Dims

EXPERT_LAYOUTS = ("stacked", "split")


def expert_roles(fmt: str, d: Dims, layer: int) -> list[tuple[str, str, tuple[int, ...]]]:
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
