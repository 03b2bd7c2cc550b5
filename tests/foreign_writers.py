"""Sharded checkpoints written by libraries nobody here wrote, with the bytes each writer was given.

- :func:`write_hub_checkpoint`: huggingface_hub's ``save_torch_state_dict(..., max_shard_size=...)`` —
  the shards and ``model.safetensors.index.json`` exactly as ``save_pretrained`` and the Hub write them
  (through the safetensors library), from a random state dict of several dtypes (bf16 among them)
  and odd shapes.
- :func:`write_gguf_split`: gguf-py's ``GGUFWriter(path, arch, split_max_tensors=N)`` — llama.cpp's
  split set (``{stem}-{i:05d}-of-{n:05d}.gguf``, ``split.no`` 0-based), optionally with a first split
  that holds metadata only (``small_first_shard``, gguf-split's ``--no-tensor-first-split``).

Each returns ``{tensor name: the bytes the writer was given}``; a test compares every tensor's bytes,
read through our index from the file it names, with these.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _torch_dtypes():
    import torch

    return (torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.int64, torch.uint8,
            torch.float64, torch.int16, torch.int32, torch.bool)


def hub_state_dict(seed: int = 0, n: int = 23) -> dict:
    """A state dict of ``n`` tensors: every dtype in turn, odd shapes (1-D to 3-D, primes), random bits."""
    import torch

    rng = np.random.default_rng(seed)
    dtypes, out = _torch_dtypes(), {}
    for i in range(n):
        dtype = dtypes[i % len(dtypes)]
        shape = tuple(int(d) for d in rng.choice([1, 3, 7, 13, 31, 37, 61], size=1 + i % 3))
        count = int(np.prod(shape))
        if dtype == torch.bool:
            tensor = torch.from_numpy(rng.integers(0, 2, count).astype(bool)).reshape(shape)
        else:
            raw = rng.integers(0, 256, count * torch.empty((), dtype=dtype).element_size(), dtype=np.uint8)
            tensor = torch.from_numpy(raw).view(dtype).reshape(shape)
        out[f"model.layers.{i // 4}.{['q', 'k', 'v', 'o'][i % 4]}_proj.weight"] = tensor
    return out


def tensor_bytes(tensor) -> bytes:
    import torch

    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def write_hub_checkpoint(directory: str | os.PathLike[str], seed: int = 0, max_shard_size: int = 2000,
                         n: int = 23, **options) -> dict[str, bytes]:
    """``save_torch_state_dict`` into ``directory`` (``options``: its ``filename_pattern``,
    ``safe_serialization``); the tensors' bytes as given to it."""
    from huggingface_hub import save_torch_state_dict

    state = hub_state_dict(seed, n)
    Path(directory).mkdir(parents=True, exist_ok=True)
    save_torch_state_dict(state, str(directory), max_shard_size=max_shard_size, **options)
    return {name: tensor_bytes(t) for name, t in state.items()}


def write_gguf_split(path: str | os.PathLike[str], seed: int = 0, split_max_tensors: int = 4, n: int = 11,
                     small_first_shard: bool = False) -> dict[str, bytes]:
    """gguf-py's split writer at ``path`` (``dir/name.gguf`` → ``dir/name-0000i-of-0000N.gguf``)."""
    from gguf import GGUFWriter

    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors,
                        small_first_shard=small_first_shard)
    given = {}
    for i in range(n):
        shape = (1 + i % 3, 5 + 2 * i)  # odd row lengths: data offsets rely on the writer's padding
        dtype = (np.float32, np.float16, np.int8, np.int32)[i % 4]
        array = rng.integers(-100, 100, size=shape).astype(dtype) if dtype in (np.int8, np.int32) \
            else rng.standard_normal(shape).astype(dtype)
        name = f"blk.{i // 3}.attn_{['q', 'k', 'v'][i % 3]}.weight"
        writer.add_tensor(name, array)
        given[name] = array.tobytes()
    writer.add_block_count((n + 2) // 3)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return given


def write_gguf_moe(path: str | os.PathLike[str], add_tensors, blocks: int, experts: int, used: int) -> Path:
    """A MoE GGUF by gguf-py's ``GGUFWriter``: ``add_tensors(writer)`` adds the tensors, then the block,
    expert and used-expert counts and the file."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "qwen3moe")
    add_tensors(writer)
    writer.add_block_count(blocks)
    writer.add_expert_count(experts)
    writer.add_expert_used_count(used)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def split_names(path: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`write_gguf_split` wrote, in split order."""
    path = Path(path)
    return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))


def read_via_index(index) -> dict[str, bytes]:
    """Every tensor's bytes, read from the file its :class:`TensorInfo` names at its offset."""
    out = {}
    for t in index.tensors:
        with open(t.file, "rb") as fh:
            fh.seek(t.offset)
            out[t.name] = fh.read(t.nbytes)
    return out


def hub_cache_snapshot(cache_dir: str | os.PathLike[str], repo_id: str, checkpoint: str | os.PathLike[str],
                       revision: str, sub: str = "") -> Path:
    """``checkpoint``'s files laid out as huggingface_hub's download cache lays out a repo:
    ``models--org--name/blobs/<sha256>`` (an LFS file's etag), ``refs/main`` holding the revision, and
    ``snapshots/<revision>/[<sub>/]<file>`` a relative link to its blob (``_create_symlink``'s). The
    caller can check the layout with huggingface_hub's own ``scan_cache_dir``/``try_to_load_from_cache``.
    Returns the snapshot folder the files are in."""
    import hashlib
    import shutil

    from huggingface_hub.file_download import repo_folder_name

    repo = Path(cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")
    snapshot = repo / "snapshots" / revision / sub
    for folder in (repo / "blobs", repo / "refs", snapshot):
        folder.mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for f in sorted(Path(checkpoint).iterdir()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot
