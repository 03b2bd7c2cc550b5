"""Sharded synthetic models, laid out as the real writers lay them out.

safetensors: ``model-00001-of-00004.safetensors`` … and ``model.safetensors.index.json`` holding
``{"metadata": {"total_size": <tensor bytes>}, "weight_map": {tensor: file}}`` (``save_pretrained`` /
huggingface_hub). GGUF: ``model-00001-of-00003.gguf`` … each a whole GGUF file with ``split.no``
(0-based), ``split.count`` and ``split.tensors.count``, the model's key/values in the first only
(llama.cpp's gguf-split). Tensor ``i`` of the plan has the same bytes whichever file it lands in.
"""
from __future__ import annotations

import json
import os
import re
from typing import Sequence

from workbench.errors import ParamError
from workbench.output.outdir import OutDir
from workbench.output.origin import MARK
from workbench.output.files import refuse_overwrite
from workbench.formats.index import TensorIndex
from workbench.formats.synth_layout import TensorSpec
from workbench.formats.synth_remainder import with_remainder
from workbench.formats.synth_write import Numbered, write_gguf, write_safetensors

_EXPERT = re.compile(r"^(.*\.experts)\.\d+\.(.*)$")  # model.layers.N.mlp.experts.E.<proj>: a blob's member


def plan_shards(specs: Sequence[TensorSpec], shards: int, max_shard_size: int | None) -> list[Numbered]:
    """The plan's tensors (numbered) cut into files, in order; no file is empty."""
    if max_shard_size is not None:
        if max_shard_size <= 0:
            raise ParamError("synth", "max_shard_size", f"must be positive, got {max_shard_size}")
        return _by_max_size(list(enumerate(specs)), max_shard_size)
    units = _units(specs)
    if not 1 <= shards <= len(units):
        raise ParamError("synth", "shards", f"must be in 1..{len(units)} for this model "
                                            f"({len(units)} tensors or expert groups), got {shards}")
    total = sum(s.nbytes for s in specs)
    out: list[list[tuple[int, TensorSpec]]] = []
    done = 0
    for k, unit in enumerate(units):
        # the file where the unit's middle byte falls, in order, no file skipped, none left empty
        mid = done + sum(s.nbytes for _, s in unit) // 2
        target = max(min(mid * shards // max(total, 1), shards - 1), shards - (len(units) - k), len(out) - 1)
        if target >= len(out):
            out.append([])
        out[-1].extend(unit)
        done += sum(s.nbytes for _, s in unit)
    return out


def _units(specs: Sequence[TensorSpec]) -> list[Numbered]:
    """Consecutive tensors that must share a file: each expert group (layer, projection) of a split
    safetensors MoE; every other tensor alone."""
    units: list[list[tuple[int, TensorSpec]]] = []
    key_of_last = None
    for i, s in enumerate(specs):
        m = _EXPERT.match(s.name)
        key = (m.group(1), m.group(2)) if m else None
        if key is not None and key == key_of_last:
            units[-1].append((i, s))
        else:
            units.append([(i, s)])
        key_of_last = key
    return units


def _by_max_size(numbered: Numbered, limit: int) -> list[Numbered]:
    """save_pretrained's rule: a new file when the next tensor would pass the limit (a larger tensor
    gets a file of its own)."""
    out: list[list[tuple[int, TensorSpec]]] = [[]]
    size = 0
    for item in numbered:
        if out[-1] and size + item[1].nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item[1].nbytes
    return out


def shard_paths(out: str, fmt: str, count: int) -> tuple[str, list[str]]:
    """(directory, file names) for ``count`` shards at ``out`` (a directory, or a file name's stem)."""
    ext = "." + fmt
    if out.endswith(ext):
        directory, stem = os.path.dirname(out) or ".", os.path.basename(out)[: -len(ext)]
    else:
        directory, stem = out, "model"
    return directory, [f"{stem}-{i:05d}-of-{count:05d}{ext}" for i in range(1, count + 1)]


def write_set(out: str | os.PathLike[str], fmt: str, specs: list[TensorSpec], meta: dict[str, int | str],
              alignment: int, seed: int, shards: int, max_shard_size: int | None,
              expert_remainder: int | None = None, force: bool = False, ours_only: bool = False) -> TensorIndex:
    """Write the set (each file through a new ``.partial`` file and a rename, the safetensors index last)
    and return its index. Every member is checked as a single file is before any is written (without
    ``force`` an existing model or ledger is refused; with ``ours_only`` anything the workbench did not
    write), and the set's own directory (``out`` naming a directory) is never reached through a link.
    ``expert_remainder``: pads placed file by file (synth_remainder)."""
    from workbench.formats import open_index

    files = [with_remainder(fmt, f, alignment, expert_remainder) for f in plan_shards(specs, shards, max_shard_size)]
    n_tensors = sum(len(f) for f in files)
    directory, names = shard_paths(os.fspath(out), fmt, len(files))
    outputs = names + ([_st_index_name(names[0])] if fmt == "safetensors" else [])
    made = 0 if os.fspath(out).endswith("." + fmt) else 1  # a set's own directory is the workbench's
    with OutDir.open(directory, made=made) as where:
        for name in outputs:
            refuse_overwrite(os.path.join(directory, name), force=force, ours_only=ours_only)
        for no, (name, numbered) in enumerate(zip(names, files)):
            where.write(name, lambda _fd, tmp, n=numbered, k=no: (
                write_gguf(tmp, n, meta, alignment, seed, (k, len(files), n_tensors)) if fmt == "gguf"
                else write_safetensors(tmp, n, meta, alignment, seed)))
        if fmt == "safetensors":
            doc = {"metadata": {"total_size": sum(s.nbytes for f in files for _, s in f), MARK: "index"},
                   "weight_map": {s.name: name for name, numbered in zip(names, files) for _, s in numbered}}
            where.write_bytes(_st_index_name(names[0]), (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return open_index(os.path.join(directory, names[0]))


def _st_index_name(first_shard: str) -> str:
    stem = first_shard.split("-00001-of-")[0]
    return f"{stem}.safetensors.index.json"
