"""Which files of a directory are a dtype *variant*, and why each file beside a model is left out of it.

transformers' ``variant=`` rule (``_add_variant``): ``model.safetensors`` saved with ``variant="fp16"`` is
``model.fp16.safetensors``; sharded, ``model.fp16-0000i-of-0000N.safetensors`` under the index
``model.safetensors.index.fp16.json`` (huggingface_hub, given the pattern ``model.fp16{suffix}``, names its
index ``model.fp16.safetensors.index.json``). transformers loads a variant only when asked for it by
``variant=``, so a directory never means one (directory.py); named directly (the file, its index or a
shard), a variant is measured like any model. By names alone, like directory.py: nothing is opened.
"""
from __future__ import annotations

import os
import re

VARIANT_STEMS = frozenset({"model", "diffusion_pytorch_model"})  # weights names _add_variant is applied to
_FILE = re.compile(r"^(?P<stem>[^.]+)\.(?P<variant>[A-Za-z0-9_]+)(?:-(?P<no>\d{5})-of-(?P<count>\d{5}))?"
                   r"\.safetensors$")
_INDEX = re.compile(r"^(?P<stem>[^.]+)(?:\.safetensors\.index\.(?P<after>[^.]+)|\.(?P<before>[^.]+)"
                    r"\.safetensors\.index)\.json$")
_SHARD = re.compile(r"^(?P<prefix>[^.]+)-\d{5}-of-\d{5}\.safetensors$")
PICKLE_EXTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
WEIGHT_EXTS = (".safetensors", ".gguf", *PICKLE_EXTS)


def variant_index(name: str) -> tuple[str, str] | None:
    """(stem, variant) of a variant's index name (``model.safetensors.index.fp16.json``,
    ``model.fp16.safetensors.index.json``); None for any other name."""
    m = _INDEX.match(name)
    if m is None:
        return None
    if m.group("after"):
        return m.group("stem"), m.group("after")
    return (m.group("stem"), m.group("before")) if m.group("stem") in VARIANT_STEMS else None


def variant_indexes(directory: str, prefix: str) -> list[str]:
    """The variant indexes in ``directory`` that may claim the plain-named shards ``<prefix>-0000i-of-0000N``
    (``model.safetensors.index.fp16.json`` for ``model-…``): a shard named on its own finds its set's index."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [n for n in names if (variant_index(n) or ("", ""))[0] == prefix]


def variants_of(names: list[str]) -> dict[str, str]:
    """name → variant for every file of a variant among ``names``: ``model.<v>.safetensors``, its shards,
    its index, and the plain-named shards ``<stem>-0000i-of-0000N`` that only a variant's index claims
    (no ``<stem>.safetensors.index.json`` beside it)."""
    out: dict[str, str] = {}
    claimed: dict[str, str] = {}  # a stem whose plain-named shards a variant index claims → the variant
    present = set(names)
    for name in names:
        index = variant_index(name)
        if index is not None:
            out[name] = index[1]
            if f"{index[0]}.safetensors.index.json" not in present:
                claimed.setdefault(index[0], index[1])
            continue
        m = _FILE.match(name)
        if m and m.group("stem") in VARIANT_STEMS:
            out[name] = m.group("variant")
    for name in names:
        m = _SHARD.match(name)
        if m and m.group("prefix") in claimed and name not in out:
            out[name] = claimed[m.group("prefix")]
    return out


def is_weights(name: str) -> bool:
    """Whether a directory entry holds (or indexes) weights: what a list of the files left out shows."""
    return name.endswith(WEIGHT_EXTS) or _INDEX.match(name) is not None or (
        name.endswith(".json") and ".safetensors.index" in name)


def why_left_out(name: str, variants: dict[str, str]) -> str:
    """Why a weights file beside the model is not part of it, in a few words."""
    lower = name.lower()
    if name in variants:
        return f"the {variants[name]} variant: transformers loads it only with variant=\"{variants[name]}\""
    if lower.startswith("adapter_model"):
        return "a PEFT adapter"
    if "mmproj" in lower:
        return "a multimodal projector"
    if lower.startswith("consolidated"):
        return "consolidated (Mistral's own format)"
    if lower.endswith(PICKLE_EXTS):
        return "a PyTorch pickle (never loaded)"
    if ".safetensors.index" in name:
        return "another index"
    return "not part of the model"


def left_out(names: list[str], taken: set[str]) -> tuple[tuple[str, str], ...]:
    """(name, why) for every weights file among ``names`` that is not in ``taken``; a set's numbered
    shards as one entry (``model.fp16-0000i-of-00002.safetensors (2 files)``)."""
    variants = variants_of(names)
    shown = [n for n in sorted(names) if n not in taken and is_weights(n)]
    return tuple((key, why_left_out(first, variants)) for key, first in grouped(shown))


def grouped(names: list[str]) -> list[tuple[str, str]]:
    """(how to show it, its first name) for ``names`` with a set's numbered shards as one entry:
    ``model-0000i-of-00004.safetensors (4 files)``."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(re.sub(r"-\d{5}-of-(\d{5})(\.\w+)$", r"-0000i-of-\1\2", name), []).append(name)
    return [(key if len(group) == 1 else f"{key} ({len(group)} files)", group[0]) for key, group in groups.items()]
