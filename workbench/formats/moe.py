"""Group a MoE model's expert tensors into :class:`ExpertBlob` s, one per (layer, projection).

Two layouts exist in the wild:

* GGUF stacks all experts of a (layer, projection) into one tensor, ``blk.N.ffn_gate_exps.weight``
  with numpy shape ``(n_experts, rows, cols)``; expert ``e`` is the byte range
  ``offset + e * stride`` of length ``stride = nbytes / n_experts``, so the blob is contiguous.
* safetensors mostly stores one tensor per expert (``model.layers.N.mlp.experts.E.gate_proj.weight``,
  or Mixtral's ``block_sparse_moe.experts.E.w1|w3|w2``); where they lie in the file is up to the
  writer, so contiguity and stride are measured.
* gpt-oss style safetensors stack them like GGUF: ``model.layers.N.mlp.experts.gate_up_proj`` (and
  ``down_proj``, with ``_bias`` / ``_blocks`` / ``_scales`` companions) holds every expert of the
  layer along its first dimension; split by stride like a GGUF stacked tensor.

Blob names are the projection (``gate``, ``up``, ``down``, ``gate_up``), the same for both formats;
a non-weight companion tensor (e.g. ``.weight_scale_inv``) gets its own blob named after its suffix.
"""
from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Iterable

from workbench.errors import FormatError
from workbench.formats.index import ExpertBlob, TensorInfo

# Layer and expert numbers longer than 6 digits are not numbers a model uses (and int() refuses more
# than 4300): such a name indexes as a plain tensor.
_GGUF_EXPS = re.compile(r"^blk\.(\d{1,6})\.ffn_(gate|up|down|gate_up)_exps\.weight$")
_PROJECTIONS = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "gate_up_proj": "gate_up",
                # Mixtral's naming: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down)
                "w1": "gate", "w3": "up", "w2": "down"}
MAX_EXPERTS = 8192  # the largest released MoE models have 512; a larger count is a corrupt header


def group_blobs(fmt: str, tensors: list[TensorInfo]) -> tuple[tuple[ExpertBlob, ...], list[str]]:
    """The expert blobs of a model's tensors (one file or a set), and a note per expert group that
    spans two files: such a group is no blob (one copy cannot cover it) and loads as plain tensors."""
    if fmt == "gguf":
        return group_gguf_experts("", tensors), []
    split = group_safetensors_experts(tensors)
    blobs = [b for b in split if _one_file(b, tensors)]
    notes = [f"experts of layer {b.layer} {b.name} lie in {len(_files_of(b, tensors))} files "
             f"({', '.join(sorted(os.path.basename(f) for f in _files_of(b, tensors)))}): not a blob, "
             f"loaded as {b.n_experts} plain tensors" for b in split if not _one_file(b, tensors)]
    blobs += group_stacked_safetensors_experts("", tensors)
    return tuple(sorted(blobs, key=lambda b: (b.layer, b.file, b.offset))), notes


def _files_of(blob: ExpertBlob, tensors: list[TensorInfo]) -> set[str]:
    names = set(blob.tensors)
    return {t.file for t in tensors if t.name in names}


def _one_file(blob: ExpertBlob, tensors: list[TensorInfo]) -> bool:
    return len(_files_of(blob, tensors)) <= 1


def match_gguf_experts_name(name: str) -> tuple[int, str] | None:
    """``blk.N.ffn_<proj>_exps.weight`` → (N, projection), else None."""
    m = _GGUF_EXPS.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def group_gguf_experts(path: str, tensors: Iterable[TensorInfo]) -> tuple[ExpertBlob, ...]:
    """Split each stacked ``blk.N.ffn_*_exps.weight`` tensor into per-expert slices."""
    blobs = []
    for t in tensors:
        m = _GGUF_EXPS.match(t.name)
        if m is not None:
            blobs.append(_split_stacked(path or t.file, t, int(m.group(1)), m.group(2)))
    return tuple(sorted(blobs, key=lambda b: (b.layer, b.offset)))


def group_stacked_safetensors_experts(path: str, tensors: Iterable[TensorInfo]) -> tuple[ExpertBlob, ...]:
    """Split each gpt-oss style ``layers.N.mlp.experts.<proj>_proj[suffix]`` tensor by its first dim."""
    blobs = []
    for t in tensors:
        found = match_stacked_name(t.name)
        if found is None:
            continue
        layer, proj, suffix = found
        name = proj if suffix in ("", ".weight") else f"{proj}{suffix}"
        blobs.append(_split_stacked(path or t.file, t, layer, name))
    return tuple(sorted(blobs, key=lambda b: (b.layer, b.offset)))


def _split_stacked(path: str, t: TensorInfo, layer: int, name: str) -> ExpertBlob:
    """Experts along the first (numpy) dimension: expert ``e`` is ``offset + e * stride``."""
    if len(t.shape) < 2 or t.shape[0] < 1:
        raise FormatError(path, f"tensor '{t.name}'.shape", f"stacked experts need >= 2 dims, got {t.shape}")
    n = t.shape[0]
    if n > MAX_EXPERTS:  # checked before building one slice per expert
        raise FormatError(path, f"tensor '{t.name}'.shape", f"{n} experts (at most {MAX_EXPERTS})")
    if t.nbytes % n or t.nbytes < n:
        raise FormatError(path, f"tensor '{t.name}'.nbytes", f"{t.nbytes} bytes do not split into {n} experts")
    stride = t.nbytes // n
    slices = tuple((t.offset + e * stride, stride) for e in range(n))
    return ExpertBlob(layer, name, n, stride, True, slices, (t.name,), t.file)


def group_safetensors_experts(tensors: Iterable[TensorInfo]) -> tuple[ExpertBlob, ...]:
    """Group per-expert tensors by (layer, projection), in expert order, and measure their layout."""
    groups: dict[tuple[int, str], list[tuple[int, TensorInfo]]] = defaultdict(list)
    for t in tensors:
        found = match_expert_name(t.name)
        if found is None:
            continue
        layer, expert, proj, suffix = found
        name = proj if suffix in ("", ".weight") else f"{proj}{suffix}"
        groups[(layer, name)].append((expert, t))
    blobs = [_measure_blob(layer, name, sorted(members, key=lambda et: et[0]))
             for (layer, name), members in groups.items()]
    return tuple(sorted(blobs, key=lambda b: (b.layer, b.offset)))


def match_expert_name(name: str) -> tuple[int, int, str, str] | None:
    """``...layers.L. ... experts.E. ... {gate,up,down,gate_up}_proj[.suffix]`` (or Mixtral's
    ``experts.E.w1|w2|w3``) → (L, E, projection, suffix), else None.

    Walks the dot-separated parts once: a backtracking regex took seconds on a long crafted name.
    """
    parts = name.split(".")
    layer_at = next((i for i in range(len(parts) - 1) if parts[i] == "layers" and _is_number(parts[i + 1])), None)
    if layer_at is None:
        return None
    expert_at = next((i for i in range(layer_at + 2, len(parts) - 1)
                      if parts[i] == "experts" and _is_number(parts[i + 1])), None)
    if expert_at is None:
        return None
    if parts[expert_at + 2:expert_at + 3] in (["w1"], ["w2"], ["w3"]):
        proj_at = expert_at + 2
    else:
        proj_at = next((i for i in range(expert_at + 2, len(parts)) if parts[i].endswith("_proj")
                        and parts[i] in _PROJECTIONS), None)
    if proj_at is None:
        return None
    suffix = "".join("." + p for p in parts[proj_at + 1:])
    return int(parts[layer_at + 1]), int(parts[expert_at + 1]), _PROJECTIONS[parts[proj_at]], suffix


def match_stacked_name(name: str) -> tuple[int, str, str] | None:
    """``...layers.L. ... experts.{gate_up,gate,up,down}_proj[.suffix]`` with no expert number
    (gpt-oss) → (L, projection, suffix), else None; ``shared_experts`` is another part, not matched."""
    parts = name.split(".")
    layer_at = next((i for i in range(len(parts) - 1) if parts[i] == "layers" and _is_number(parts[i + 1])), None)
    if layer_at is None:
        return None
    for i in range(layer_at + 2, len(parts) - 1):
        head, _, tail = parts[i + 1].partition("_proj")
        if parts[i] == "experts" and head + "_proj" in _PROJECTIONS and not head.startswith("w"):
            suffix = ("_" + tail.lstrip("_") if tail else "") + "".join("." + p for p in parts[i + 2:])
            return int(parts[layer_at + 1]), _PROJECTIONS[head + "_proj"], suffix
    return None


def _is_number(part: str) -> bool:
    return 0 < len(part) <= 6 and part.isascii() and part.isdigit()


def _measure_blob(layer: int, name: str, members: list[tuple[int, TensorInfo]]) -> ExpertBlob:
    """Contiguous iff every expert starts where the previous one ended; stride if constant, else 0."""
    slices = tuple((t.offset, t.nbytes) for _, t in members)
    contiguous = all(slices[i][0] == slices[i - 1][0] + slices[i - 1][1] for i in range(1, len(slices)))
    gaps = {slices[i][0] - slices[i - 1][0] for i in range(1, len(slices))}
    if not gaps:
        stride = slices[0][1]  # one expert: its own length, as for a stacked tensor
    else:
        stride = gaps.pop() if len(gaps) == 1 else 0
        stride = max(stride, 0)
    files = {t.file for _, t in members}
    return ExpertBlob(layer, name, len(slices), stride, contiguous, slices, tuple(t.name for _, t in members),
                      files.pop() if len(files) == 1 else "")
