"""One :class:`TensorIndex` over the files of a model, checked as a set.

Each member is indexed on its own by its format, then the set is checked: one format for every member,
every tensor in exactly one file, a safetensors index's ``weight_map`` and ``total_size`` agreeing with
the shards, a GGUF split set's ``split.no`` / ``split.count`` / ``split.tensors.count`` agreeing with its
files. Expert blobs are grouped over the whole set; a group whose experts lie in two files is not a blob
(its tensors load as plain tensors) and the index says so in ``notes``.
"""
from __future__ import annotations

import dataclasses
import os
from collections import Counter
from typing import Callable

from workbench.errors import FormatError
from workbench.formats.bounds import MAX_TENSORS
from workbench.formats.index import ModelFile, TensorIndex, TensorInfo
from workbench.formats.moe import group_blobs
from workbench.formats.resolve import ModelSpec, gguf_split_siblings

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"

IndexOne = Callable[[str, int], TensorIndex]  # one member file, the tensors its model has left → its index


def index_set(spec: ModelSpec, index_one: IndexOne) -> TensorIndex:
    """The model's index; a lone GGUF whose keys say it is one split of several brings its siblings.
    Each member is indexed with what the set has left of the one :data:`MAX_TENSORS` cap, so the set's
    work is bounded as one file's is."""
    first = index_one(spec.files[0], MAX_TENSORS)
    if len(spec.files) == 1 and spec.weight_map is None:  # an index over one shard is still checked
        count = _split_int(first, SPLIT_COUNT)
        if first.format != "gguf" or count is None or count <= 1:  # llama.cpp: split when count > 1
            return first
        siblings = gguf_split_siblings(first.path, count)
        if siblings is None:
            raise FormatError(first.path, SPLIT_COUNT, f"split.count is {count} but the name is not "
                              f"'<name>-0000i-of-{count:05d}.gguf': cannot find the other splits")
        spec = dataclasses.replace(spec, path=siblings[0], files=siblings, kind="gguf-split")
    parts, used = [], len(first)
    for f in spec.files:
        part = first if f == first.path else index_one(f, MAX_TENSORS - used)
        used += len(part) if part is not first else 0
        parts.append(part)
    _check_formats(parts)
    if parts[0].format == "gguf":
        _check_gguf_splits(parts)
    tensors = _check_unique(parts)
    if spec.weight_map is not None:
        _check_weight_map(spec, tensors)
    if spec.total_size is not None and spec.total_size != sum(t.nbytes for t in tensors):
        raise FormatError(spec.index_file, "metadata.total_size", f"says {spec.total_size} bytes, the shards "
                          f"hold {sum(t.nbytes for t in tensors)} bytes of tensors")
    return _merge(spec, parts, tensors)


def _split_int(index: TensorIndex, key: str) -> int | None:
    value = dict(index.metadata).get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise FormatError(index.path, key, f"not an integer: {value!r}") from None


def _check_formats(parts: list[TensorIndex]) -> None:
    for p in parts[1:]:
        if p.format != parts[0].format:
            raise FormatError(p.path, "format", f"is {p.format}, but {os.path.basename(parts[0].path)} is "
                                                f"{parts[0].format}: a model's shards share one format")


def _check_gguf_splits(parts: list[TensorIndex]) -> None:
    """Every split numbered once, 0..count-1 in file order, and the tensor total as stated."""
    count, have = len(parts), sum(len(q) for q in parts)
    seen: dict[int, str] = {}
    for i, p in enumerate(parts):
        no, n, total = (_split_int(p, k) for k in (SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS))
        if n is None or no is None:
            raise FormatError(p.path, SPLIT_COUNT if n is None else SPLIT_NO,
                              f"missing: a file of a {count}-file split set must say it")
        if n != count:
            raise FormatError(p.path, SPLIT_COUNT, f"is {n}, the set has {count} files")
        if not 0 <= no < count:
            raise FormatError(p.path, SPLIT_NO, f"is {no}, expected 0..{count - 1}")
        if no in seen:
            raise FormatError(p.path, SPLIT_NO, f"{no} again (also {os.path.basename(seen[no])})")
        if no != i:
            raise FormatError(p.path, SPLIT_NO, f"is {no}, but the file is split {i + 1} of {count} by name "
                                                f"(split.no {i})")
        seen[no] = p.path
        if total is not None and total != have:
            raise FormatError(p.path, SPLIT_TENSORS, f"says {total} tensors, the {count} splits hold {have}")


def _check_unique(parts: list[TensorIndex]) -> list[TensorInfo]:
    where: dict[str, str] = {}
    out = []
    for p in parts:
        for t in p.tensors:
            if t.name in where:
                raise FormatError(p.path, f"tensor '{t.name}'",
                                  f"also in {os.path.basename(where[t.name])}: a tensor lives in one file")
            where[t.name] = p.path
            out.append(t)
    return out


def _check_weight_map(spec: ModelSpec, tensors: list[TensorInfo]) -> None:
    actual = {t.name: t.file for t in tensors}
    real: dict[str, str] = {}  # realpath per file, not per tensor (400 tensors: 85 ms → 1 ms)

    def same(a: str, b: str) -> bool:
        return a == b or real.setdefault(a, os.path.realpath(a)) == real.setdefault(b, os.path.realpath(b))

    for name, member in spec.weight_map.items():
        if name not in actual:
            raise FormatError(member, f"tensor '{name}'", f"listed in {os.path.basename(spec.index_file)} "
                                                          "but absent from this shard")
        if not same(actual[name], member):
            raise FormatError(actual[name], f"tensor '{name}'", f"{os.path.basename(spec.index_file)} puts it "
                                                                f"in {os.path.basename(member)}")
    for name, member in actual.items():
        if name not in spec.weight_map:
            raise FormatError(member, f"tensor '{name}'",
                              f"in this shard but missing from {os.path.basename(spec.index_file)}")


def _merge(spec: ModelSpec, parts: list[TensorIndex], tensors: list[TensorInfo]) -> TensorIndex:
    files = tuple(ModelFile(p.path, p.format, p.size, p.data_offset, p.alignment, len(p), *p.files[0].data_range,
                            mtime_ns=p.mtime_ns, inode=p.inode) for p in parts)
    blobs, notes = group_blobs(parts[0].format, tensors)
    first = parts[0]
    return TensorIndex(
        path=spec.path, format=first.format, size=sum(p.size for p in parts), data_offset=first.data_offset,
        alignment=first.alignment, tensors=tuple(tensors), blobs=blobs, metadata=first.metadata,
        mtime_ns=first.mtime_ns, inode=first.inode, files=files, index_file=spec.index_file,
        notes=tuple(notes) + _alignment_note(parts))


def _alignment_note(parts: list[TensorIndex]) -> tuple[str, ...]:
    aligns = Counter(p.alignment for p in parts)
    if len(aligns) == 1:
        return ()
    return (f"files differ in alignment: {', '.join(f'{a} ({n} files)' for a, n in sorted(aligns.items()))}",)
