"""How much work a model's index may ask for before its first member is looked at.

A ``model.safetensors.index.json`` (or a shard's name) sets the work resolution does: every member it
names is confined (``realpath``, one ``lstat`` per path component) and stat'ed. Under the index's
byte limit alone, 1.1 M distinct missing names took 70 s, 7,000 names 2,000 directories deep 51 s, and
a ``-of-99999`` name 4 s before the first error (issue 24 §2). So the shape is capped, on strings
alone, before any system call:

- :data:`MAX_TENSORS` entries in a ``weight_map``: the largest public checkpoints list ~92 k
  (DeepSeek-V3: 58 MoE layers × 256 experts × 3 projections, each FP8 weight with its scale) to
  ~140 k (Kimi-K2: 60 × 384 × 3 × 2); 2¹⁸ = 262,144 leaves 1.9× room and keeps a capped index's
  resolution near 0.35 s of CPU on the 2-core VM (500 k took 0.7 s). Checked on the raw bytes (a
  ``"`` count) before the JSON is parsed: parsing 1.1 M entries alone costs more than a second.
- :data:`MAX_MEMBERS` files in a set (distinct ``weight_map`` values, a numbered set's count, a
  directory's files): the largest public sets have a few hundred (Llama-3.1-405B 191, DeepSeek-V3
  163) to ~2,000 shards; 4,096 is twice that, and a set that large still fits the descriptor limit
  a load raises itself to on common systems (workbench.io.descriptors).
- :data:`MAX_NAME_DEPTH` path components in a member name: every writer we know (huggingface_hub,
  transformers, gguf-split) puts shards flat beside the index; 8 leaves room for a hand-made layout.
- :data:`MAX_COMPONENT_BYTES` per component: Linux's NAME_MAX — no longer name can exist.

Members are then confined and stat'ed one at a time, in order, and the first that fails stops
resolution (resolve.py).
"""
from __future__ import annotations

from workbench.errors import FormatError

MAX_TENSORS = 262_144
MAX_MEMBERS = 4_096
MAX_NAME_DEPTH = 8
MAX_COMPONENT_BYTES = 255
_SLACK_QUOTES = 4_096  # metadata's strings beside the weight_map (total_size, a format name …)


def check_index_strings(index_path: str, raw: bytes) -> None:
    """Refuse, before parsing, an index with more strings than :data:`MAX_TENSORS` entries need.

    Every JSON string has two unescaped quotes and a weight_map entry two strings, so an index of at
    most ``MAX_TENSORS`` entries holds at most ``4 × MAX_TENSORS`` quotes plus its metadata's.
    """
    quotes = raw.count(b'"')
    if quotes > 4 * MAX_TENSORS + _SLACK_QUOTES:
        raise FormatError(index_path, "weight_map", f"about {quotes // 4:,} entries: more than the "
                          f"{MAX_TENSORS:,} tensors an index may list (the largest public checkpoints list ~140 k)")


def check_member_name(index_path: str, name: str, where: str) -> None:
    """Refuse a member name deeper than :data:`MAX_NAME_DEPTH` or with a component longer than
    :data:`MAX_COMPONENT_BYTES`, on the string alone."""
    parts = [p for p in name.split("/") if p]
    if len(parts) > MAX_NAME_DEPTH:
        raise FormatError(index_path, where, f"{_short(name)} is {len(parts)} path components deep: a member "
                          f"lies at most {MAX_NAME_DEPTH} deep (shards sit beside their index)")
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
            raise FormatError(index_path, where, f"{_short(name)} has a component of {len(part):,} characters: "
                              f"longer than a file name can be ({MAX_COMPONENT_BYTES} bytes)")


def check_member_count(path: str, field: str, count: int) -> None:
    """Refuse a set of more than :data:`MAX_MEMBERS` files."""
    if count > MAX_MEMBERS:
        raise FormatError(path, field, f"{count:,} files: more than the {MAX_MEMBERS:,} a model's set may have "
                                       "(the largest public checkpoints have ~2,000 shards)")


def _short(name: str, keep: int = 60) -> str:
    return repr(name) if len(name) <= keep else repr(name[:keep]) + f"… ({len(name):,} characters)"

