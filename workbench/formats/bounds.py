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

:data:`MAX_TENSORS` is one cap per model, whatever its files (issue 35 §1: a 94 MB safetensors header
of 1.4 M tensors took 32 s and 1.4 GB to index, a GGUF of 3 M tensors 31 s and 2.3 GB). Each member is
indexed with the budget its set has left (sets.py), and each format checks its count against it before
the index is built: GGUF by its header's ``tensor_count``; safetensors by its header's strings before
the JSON is parsed (:func:`check_header_strings`: every tensor entry holds five), then by its entries.
:data:`MAX_KV` bounds a GGUF's key/values likewise (real files hold 20–60), and :data:`MAX_KV_ITEMS` the
strings and arrays inside them that the walk steps over one by one (a vocabulary and its merges: a few
hundred thousand; a 480 MB file of 60 M empty strings took 6 s of CPU to walk).
"""
from __future__ import annotations

from workbench.errors import FormatError

MAX_TENSORS = 262_144
MAX_MEMBERS = 4_096
MAX_NAME_DEPTH = 8
MAX_COMPONENT_BYTES = 255
MAX_KV = 65_536
MAX_KV_ITEMS = 2**22  # strings and nested arrays in a GGUF's key/values, in all (vocabularies: ~150–260 k tokens)
_SLACK_QUOTES = 4_096  # metadata's strings beside the weight_map (total_size, a format name …)
# JSON values a safetensors header of ``n`` tensors can hold: per tensor a key, an entry of three fields,
# at most 8 dimensions and two offsets (each value after the first follows a ``,`` or a ``:``).
_SEPARATORS_PER_TENSOR = 1 + 3 + 2 + 7 + 1 + 1


def check_index_strings(index_path: str, raw: bytes) -> None:
    """Refuse, before parsing, an index with more strings than :data:`MAX_TENSORS` entries need.

    Every JSON string has two unescaped quotes and a weight_map entry two strings, so an index of at
    most ``MAX_TENSORS`` entries holds at most ``4 × MAX_TENSORS`` quotes plus its metadata's.
    """
    quotes = raw.count(b'"')
    if quotes > 4 * MAX_TENSORS + _SLACK_QUOTES:
        raise FormatError(index_path, "weight_map", f"about {quotes // 4:,} entries: more than the "
                          f"{MAX_TENSORS:,} tensors an index may list (the largest public checkpoints list ~140 k)")


def check_tensor_count(path: str, field: str, count: int, budget: int = MAX_TENSORS, about: bool = False) -> None:
    """Refuse a file of ``count`` tensors where its model has ``budget`` left of :data:`MAX_TENSORS`."""
    if count > budget:
        earlier = f" ({MAX_TENSORS - budget:,} in the model's other files)" if budget < MAX_TENSORS else ""
        raise FormatError(path, field, f"{'about ' if about else ''}{count:,} tensors: more than the "
                          f"{MAX_TENSORS:,} a model may hold{earlier} (the largest public checkpoints hold ~140 k)")


def check_header_strings(path: str, raw: bytes, budget: int = MAX_TENSORS) -> None:
    """Refuse, before parsing, a safetensors header with more strings (five per tensor: its name,
    ``dtype`` and its value, ``shape``, ``data_offsets``) or more values than ``budget`` tensors hold."""
    named = raw.count(b'"data_offsets"')  # every tensor's entry: exact for every writer (none escapes it)
    if named > budget:
        check_tensor_count(path, "header", named, budget)
    quotes = raw.count(b'"')  # a bound whatever the spelling (JSON may escape a key's letters)
    if quotes > 10 * budget + _SLACK_QUOTES:
        check_tensor_count(path, "header", quotes // 10, budget, about=True)
    separators = raw.count(b",") + raw.count(b":")
    if separators > _SEPARATORS_PER_TENSOR * budget + _SLACK_QUOTES:
        raise FormatError(path, "header", f"{separators:,} JSON values: more than a header of "
                          f"{budget:,} tensors can hold (at most {_SEPARATORS_PER_TENSOR} each)")


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

