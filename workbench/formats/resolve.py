"""Which files a model path names: one file, a sharded safetensors set, or a gguf-split set.

A path may be a model file, a shard of a set (``model-00002-of-00004.safetensors``,
``…-00001-of-00003.gguf``), a safetensors index (``model.safetensors.index.json``) or a directory.
Resolution only looks at names, the index's JSON and stat results; no model file is opened here, so an
index that points outside the model's directory is refused before anything of it is read.

The confinement rule: every member lies in the model's directory (after resolving ``..`` and links).
One kind of link may leave it: the Hugging Face hub cache's, where ``<repo>/snapshots/<rev>/<file>``
links to ``<repo>/blobs/<sha>``.
"""
from __future__ import annotations

import glob
import json
import os
import re
import stat
from dataclasses import dataclass

from workbench.errors import FormatError

ST_INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20  # a weight_map for 100k tensors is a few MB
SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})(?P<ext>\.[A-Za-z0-9]+)$")


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: its canonical path, member files in order, and the index's content if any.

    ``path`` re-resolves to the same set (the index file, else the first shard, else the file).
    ``weight_map`` is tensor → member path (None without an index); ``total_size`` the index's
    ``metadata.total_size`` when it states one.
    """

    path: str
    files: tuple[str, ...]
    index_file: str = ""
    weight_map: dict[str, str] | None = None
    total_size: int | None = None
    kind: str = "file"  # file | safetensors-index | safetensors-shards | safetensors-dir | gguf-split


def resolve_model(path: str | os.PathLike[str]) -> ModelSpec:
    """Resolve ``path`` to a :class:`ModelSpec`; FormatError (one line) for anything that is not a model."""
    path = os.path.abspath(os.fspath(path))
    st = _stat(path)
    if stat.S_ISDIR(st.st_mode):
        return _resolve_dir(path)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(path, "path", "not a regular file")
    if path.endswith(".json"):
        return read_st_index(path)
    m = SHARD_RE.match(os.path.basename(path))
    if m and m.group("ext") == ".safetensors":
        sibling_index = os.path.join(os.path.dirname(path), ST_INDEX)
        if os.path.isfile(sibling_index):
            spec = read_st_index(sibling_index)
            if path in spec.files or os.path.realpath(path) in map(os.path.realpath, spec.files):
                return spec
        return _numbered_set(path, m, "safetensors-shards")
    return ModelSpec(path, (path,))  # a GGUF split is found by its keys, when indexed (sets.py)


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file or directory") from None
    except OSError as exc:
        raise FormatError(path, "path", exc.strerror or str(exc)) from None


def _resolve_dir(directory: str) -> ModelSpec:
    """A directory: its safetensors index, else every ``*.safetensors``, else its GGUF (split) files."""
    index = os.path.join(directory, ST_INDEX)
    if os.path.isfile(index):
        return read_st_index(index)
    others = sorted(glob.glob(os.path.join(glob.escape(directory), "*.safetensors.index.json")))
    if len(others) == 1:
        return read_st_index(others[0])
    if others:
        raise FormatError(directory, "path", f"{len(others)} safetensors index files "
                          f"({', '.join(os.path.basename(o) for o in others[:3])}): name one of them")
    for ext in (".safetensors", ".gguf"):
        found = sorted(f for f in glob.glob(os.path.join(glob.escape(directory), "*" + ext)) if os.path.isfile(f))
        if len(found) == 1:
            return ModelSpec(found[0], (found[0],))
        if found:
            return _many_files(directory, found, ext)
    raise FormatError(directory, "path", "is a directory with no model in it (no model.safetensors.index.json, "
                                         "*.safetensors or *.gguf)")


def _many_files(directory: str, found: list[str], ext: str) -> ModelSpec:
    """Several files of one extension: one numbered set, or (safetensors) every file as the set."""
    sets = {m.group("prefix", "count") for m in (SHARD_RE.match(os.path.basename(f)) for f in found) if m}
    if len(sets) == 1 and all(SHARD_RE.match(os.path.basename(f)) for f in found):
        first = found[0]
        return _numbered_set(first, SHARD_RE.match(os.path.basename(first)),
                             "safetensors-shards" if ext == ".safetensors" else "gguf-split")
    if ext == ".gguf":
        raise FormatError(directory, "path", f"{len(found)} GGUF files that are not one split set "
                          f"({', '.join(os.path.basename(f) for f in found[:3])}…): name the model file")
    return ModelSpec(found[0], tuple(found), kind="safetensors-dir")


def _numbered_set(member: str, m: re.Match, kind: str) -> ModelSpec:
    """``prefix-0000i-of-0000N.ext``: all N siblings, each of which must exist."""
    directory, count = os.path.dirname(member), int(m.group("count"))
    if count < 1 or not 1 <= int(m.group("no")) <= count:
        raise FormatError(member, "name", f"shard {int(m.group('no'))} of {count} is not a shard number")
    files = tuple(os.path.join(directory, f"{m.group('prefix')}-{i:05d}-of-{count:05d}{m.group('ext')}")
                  for i in range(1, count + 1))
    for f in files:
        if not os.path.isfile(f):
            raise FormatError(f, "path", f"missing shard {files.index(f) + 1} of {count} "
                                         f"(the set of {os.path.basename(member)})")
    return ModelSpec(files[0], files, kind=kind)


def read_st_index(index_path: str) -> ModelSpec:
    """A safetensors index: ``weight_map`` (tensor → shard file name) and ``metadata.total_size``."""
    doc = _load_index_json(index_path)
    wmap = doc.get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise FormatError(index_path, "weight_map", "missing, empty or not an object of tensor → file name")
    directory = os.path.dirname(index_path)
    members: dict[str, str] = {}
    weight_map: dict[str, str] = {}
    for tensor, name in wmap.items():
        if not isinstance(name, str) or not name:
            raise FormatError(index_path, f"weight_map['{tensor}']", f"must be a file name, got {name!r}")
        if name not in members:
            members[name] = confined_member(index_path, directory, name, tensor)
        weight_map[tensor] = members[name]
    files = tuple(sorted(set(members.values()), key=_shard_order))
    meta = doc.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None and (not isinstance(total, (int, float)) or isinstance(total, bool) or total < 0):
        raise FormatError(index_path, "metadata.total_size", f"must be a non-negative number, got {total!r}")
    return ModelSpec(index_path, files, index_path, weight_map,
                     None if total is None else int(total), "safetensors-index")


def _load_index_json(index_path: str) -> dict:
    size = os.path.getsize(index_path)
    if size > MAX_INDEX_BYTES:
        raise FormatError(index_path, "size", f"{size} bytes exceeds the {MAX_INDEX_BYTES}-byte limit for an index")
    try:
        with open(index_path, "rb") as fh:
            doc = json.loads(fh.read().decode("utf-8"))
    except RecursionError:
        raise FormatError(index_path, "json", "nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(index_path, "json", f"not valid UTF-8 JSON: {exc}") from None
    except OSError as exc:
        raise FormatError(index_path, "path", exc.strerror or str(exc)) from None
    if not isinstance(doc, dict):
        raise FormatError(index_path, "json", f"expected an object, got {type(doc).__name__}")
    return doc


def confined_member(index_path: str, directory: str, name: str, tensor: str) -> str:
    """The member's path, refused when it leaves ``directory`` (absolute, ``..``, a link out of it)."""
    where = f"weight_map['{tensor}']"
    if os.path.isabs(name) or "\0" in name or "\\" in name:
        raise FormatError(index_path, where, f"{name!r} is not a file name inside the model's directory")
    joined = os.path.normpath(os.path.join(directory, name))
    real_dir = os.path.realpath(directory)
    if not _inside(joined, directory) or not _inside(os.path.realpath(joined), real_dir):
        if not _hub_blob(directory, joined):
            raise FormatError(index_path, where, f"{name!r} leaves the model's directory "
                                                 f"({os.path.realpath(joined)}): refused")
    return joined


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory and path != directory


def _hub_blob(directory: str, member: str) -> bool:
    """The hub cache's layout: ``<repo>/snapshots/<rev>/<file>`` → ``<repo>/blobs/<sha>``."""
    snapshots = os.path.dirname(os.path.realpath(directory))
    if os.path.basename(snapshots) != "snapshots" or os.path.dirname(os.path.normpath(member)) != directory:
        return False
    blobs = os.path.join(os.path.dirname(snapshots), "blobs")
    return os.path.islink(member) and _inside(os.path.realpath(member), blobs)


def _shard_order(path: str) -> tuple[int, str]:
    m = SHARD_RE.match(os.path.basename(path))
    return (int(m.group("no")) if m else 0, path)


def gguf_split_siblings(path: str, count: int) -> tuple[str, ...] | None:
    """The split set's file names from one member's (``prefix-0000i-of-0000N.gguf``), else None."""
    m = SHARD_RE.match(os.path.basename(path))
    if m is None or m.group("ext") != ".gguf" or int(m.group("count")) != count:
        return None
    return _numbered_set(path, m, "gguf-split").files
