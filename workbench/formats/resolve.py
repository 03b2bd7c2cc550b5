"""Which files a model path names: one file, a sharded safetensors set, or a gguf-split set.

A path may be a model file, a shard of a set (``model-00002-of-00004.safetensors``,
``…-00001-of-00003.gguf``), a safetensors index (``model.safetensors.index.json``) or a directory,
which means the one model the Hub's loaders would take from it (directory.py, by names alone: files
beside that model are never looked at again). Resolution only reads the index's JSON and stat results; no model file is opened here, so a set that
reaches outside the model's directory is refused before anything of it is read, and a member that
is missing, or not a regular file (a FIFO, a device), is refused by its stat, before it is opened.

The confinement rule: every member that resolution *finds* (a sibling shard, a ``weight_map`` entry,
a file of a named directory, the directory's index) lies in the model's directory, after resolving
``..`` and links; the path the user named is theirs to point anywhere. One kind of link may leave
the directory: the Hugging Face hub cache's, where ``<repo>/snapshots/<rev>/[<sub>/]<file>`` links
to ``<repo>/blobs/<sha>`` (``<repo>`` named ``models--<org>--<name>`` and the like). A snapshot's
entry leads nowhere else, whether resolution finds it or the user names it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
from dataclasses import dataclass

from workbench.errors import FormatError
from workbench.formats.bounds import check_index_strings, check_member_count, check_member_name
from workbench.formats.directory import choose_model, set_index_names
from workbench.formats.variants import left_out, variant_indexes
from workbench.records.model_names import HUB_REPO_PREFIXES, hub_snapshot_of

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
    kind: str = "file"  # file | safetensors-index | safetensors-shards | gguf-split
    left_out: tuple[tuple[str, str], ...] = ()  # a directory's weights files beside the model: (name, why)


def resolve_model(path: str | os.PathLike[str]) -> ModelSpec:
    """Resolve ``path`` to a :class:`ModelSpec`; FormatError (one line) for anything that is not a model."""
    path = os.path.abspath(os.fspath(path))
    st = _stat(path)
    _check_snapshot_entry(path)
    if stat.S_ISDIR(st.st_mode):
        return _resolve_dir(path)
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(path, "path", "not a regular file")
    if path.endswith(".json"):
        return read_st_index(path)
    m = SHARD_RE.match(os.path.basename(path))
    if m and m.group("ext") == ".safetensors":
        for name in (*set_index_names(m.group("prefix")), *variant_indexes(os.path.dirname(path), m.group("prefix"))):
            sibling_index = os.path.join(os.path.dirname(path), name)
            if os.path.isfile(sibling_index):
                spec = read_st_index(confine(os.path.dirname(path), sibling_index))
                if path in spec.files or os.path.realpath(path) in map(os.path.realpath, spec.files):
                    return spec
    if m and m.group("ext") in (".safetensors", ".gguf") and int(m.group("count")) > 1:
        return _numbered_set(path, m, named=path)
    return ModelSpec(path, (path,))  # a GGUF split not named as one is found by its keys (sets.py)


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file or directory") from None
    except OSError as exc:
        raise FormatError(path, "path", exc.strerror or str(exc)) from None


def _resolve_dir(directory: str) -> ModelSpec:
    """A directory: the model the Hub's loaders would take from it (directory.py decides by names)."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if not e.is_dir()]
    except OSError as exc:
        raise FormatError(directory, "path", exc.strerror or str(exc)) from None
    choice = choose_model(directory, names)
    member = os.path.join(directory, choice.name)
    if choice.kind == "index":
        spec = read_st_index(confine(directory, member))
    elif choice.kind == "set":
        spec = _numbered_set(member, SHARD_RE.match(choice.name), named="")
    else:
        check_member(confine(directory, member), "the directory's model file")
        spec = ModelSpec(member, (member,))
    taken = {os.path.basename(f) for f in (*spec.files, spec.index_file) if f}
    return dataclasses.replace(spec, left_out=left_out(names, taken))


def _numbered_set(member: str, m: re.Match, named: str) -> ModelSpec:
    """``prefix-0000i-of-0000N.ext``: all N siblings, each of which must be a regular file in the
    directory (``named``, the file the user named, may be a link to anywhere)."""
    directory, count, ext = os.path.dirname(member), int(m.group("count")), m.group("ext")
    if count < 1 or not 1 <= int(m.group("no")) <= count:
        raise FormatError(member, "name", f"shard {int(m.group('no'))} of {count} is not a shard number")
    check_member_count(member, "name", count)
    files = tuple(os.path.join(directory, f"{m.group('prefix')}-{i:05d}-of-{count:05d}{ext}")
                  for i in range(1, count + 1))
    for i, f in enumerate(files, 1):  # one at a time: the first missing shard stops the work
        if f != named:
            confine(directory, f)
        check_member(f, f"shard {i} of {count} (the set of {os.path.basename(member)})")
    return ModelSpec(files[0], files, kind="gguf-split" if ext == ".gguf" else "safetensors-shards")


def check_member(path: str, what: str) -> None:
    """Refuse a member that is missing or not a regular file, by its stat alone (a FIFO is never opened)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FormatError(path, "path", f"missing {what}") from None
    except OSError as exc:
        raise FormatError(path, "path", f"{what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(path, "path", f"{what} is not a regular file")


def read_st_index(index_path: str) -> ModelSpec:
    """A safetensors index: ``weight_map`` (tensor → shard file name) and ``metadata.total_size``."""
    doc = _load_index_json(index_path)
    wmap = doc.get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise FormatError(index_path, "weight_map", "missing, empty or not an object of tensor → file name")
    directory = os.path.dirname(index_path)
    named: dict[str, list[str]] = {}  # file name as written → the tensors the index puts in it
    for tensor, name in wmap.items():  # strings only: the shape is bounded before any system call
        if not isinstance(name, str) or not name:
            raise FormatError(index_path, f"weight_map['{tensor}']", f"must be a file name, got {name!r}")
        if name not in named:
            check_member_name(index_path, name, f"weight_map['{tensor}']")
            check_member_count(index_path, "weight_map", len(named) + 1)
            named[name] = []
        named[name].append(tensor)
    members: dict[str, str] = {}  # file name as written → its path
    for name, tensors in named.items():  # one at a time: the first that fails stops the work
        members[name] = confined_name(index_path, directory, name, f"weight_map['{tensors[0]}']")
        more = f" (and {len(tensors) - 1} more)" if len(tensors) > 1 else ""
        check_member(members[name], f"shard: {os.path.basename(index_path)} puts tensor '{tensors[0]}'{more} in it")
    weight_map = {tensor: members[name] for tensor, name in wmap.items()}
    named_by = {members[name]: tensors for name, tensors in named.items()}
    files = tuple(sorted(named_by, key=_shard_order))
    return ModelSpec(index_path, files, index_path, weight_map, _total_size(index_path, doc), "safetensors-index")


def _total_size(index_path: str, doc: dict) -> int | None:
    meta = doc.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return None
    integral = isinstance(total, int) or (isinstance(total, float) and math.isfinite(total) and total.is_integer())
    if isinstance(total, bool) or not integral or total < 0:
        raise FormatError(index_path, "metadata.total_size", f"must be a non-negative integer, got {total!r}")
    return int(total)


def _load_index_json(index_path: str) -> dict:
    try:  # O_NONBLOCK: a FIFO put in the index's place opens at once, then fails the regular-file check
        fd = os.open(index_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FormatError(index_path, "path", exc.strerror or str(exc)) from None
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(index_path, "path", "not a regular file")
        if st.st_size > MAX_INDEX_BYTES:
            raise FormatError(index_path, "size", f"{st.st_size} bytes exceeds the {MAX_INDEX_BYTES}-byte "
                                                  "limit for an index")
        try:
            raw = fh.read(st.st_size + 1)
            check_index_strings(index_path, raw)
            doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
        except RecursionError:
            raise FormatError(index_path, "json", "nested too deeply") from None
        except _DuplicateKey as dup:
            raise FormatError(index_path, "json", f"key '{dup.key}' appears twice in one object") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise FormatError(index_path, "json", f"not valid UTF-8 JSON: {exc}") from None
        except OSError as exc:
            raise FormatError(index_path, "path", exc.strerror or str(exc)) from None
    if not isinstance(doc, dict):
        raise FormatError(index_path, "json", f"expected an object, got {type(doc).__name__}")
    return doc


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json's object hook: a key twice (``json`` keeps the last silently) is a malformed index."""
    out = dict(pairs)  # at C speed; the loop below only runs to name a key given twice
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def confined_name(index_path: str, directory: str, name: str, where: str) -> str:
    """The path of ``name`` (a weight_map value), refused when it leaves ``directory`` (absolute,
    ``..``, a link out of it)."""
    if os.path.isabs(name) or "\0" in name or "\\" in name:
        raise FormatError(index_path, where, f"{name!r} is not a file name inside the model's directory")
    joined = os.path.normpath(os.path.join(directory, name))
    if not _leaves(directory, joined):
        return joined
    raise FormatError(index_path, where, f"{name!r} {_leaving(directory, joined)}")


def confine(directory: str, member: str) -> str:
    """``member``, refused when it (or a link it is) leaves ``directory``."""
    if _leaves(directory, member):
        raise FormatError(member, "path", f"a link that {_leaving(directory, member)}")
    return member


def _leaving(directory: str, member: str) -> str:
    if _snapshot_repo(directory) is not None:
        return f"points outside its repo's blobs/ ({os.path.realpath(member)}): refused (a hub snapshot's links " \
               "lead only into its repo's blobs/)"
    return f"leaves the model's directory ({os.path.realpath(member)}): refused"


def _check_snapshot_entry(path: str) -> None:
    """The path the user named may point anywhere, except a hub snapshot's entry: one that is (or lies
    under) a link must lead into its repo's ``blobs/`` — else the bytes are not the snapshot's."""
    found = hub_snapshot_of(path)
    if found is None:
        return
    repo, real = os.path.realpath(found[0]), os.path.realpath(path)
    unlinked = os.path.join(repo, "snapshots", found[1], *found[2])  # where it lies with no link followed
    if real != unlinked and not _inside(real, os.path.join(repo, "blobs")):
        raise FormatError(path, "path", f"a hub snapshot's entry that points outside its repo's blobs/ "
                                        f"({real}): refused")


def _leaves(directory: str, member: str) -> bool:
    """Whether ``member`` lies outside ``directory`` by name or once links are resolved (the hub
    cache's blob links excepted)."""
    if not _inside(member, directory):
        return True
    return not _inside(os.path.realpath(member), os.path.realpath(directory)) and not _hub_blob(directory, member)


def _inside(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory and path != directory


def _hub_blob(directory: str, member: str) -> bool:
    """The hub cache's layout: ``<repo>/snapshots/<rev>/[<sub>/]<file>`` → ``<repo>/blobs/<sha>``."""
    repo = _snapshot_repo(directory)
    return repo is not None and os.path.islink(member) and _inside(os.path.realpath(member),
                                                                    os.path.join(repo, "blobs"))


def _snapshot_repo(directory: str) -> str | None:
    """The hub repo folder (``…/models--org--name``) whose snapshot ``directory`` (links resolved) is in."""
    here = os.path.realpath(directory)
    while os.path.dirname(here) != here:
        parent = os.path.dirname(here)
        if os.path.basename(parent) == "snapshots":
            repo = os.path.dirname(parent)
            return repo if os.path.basename(repo).startswith(HUB_REPO_PREFIXES) else None
        here = parent
    return None


def _shard_order(path: str) -> tuple[int, str]:
    m = SHARD_RE.match(os.path.basename(path))
    return (int(m.group("no")) if m else 0, path)


def gguf_split_siblings(path: str, count: int) -> tuple[str, ...] | None:
    """The split set's file names from one member's (``prefix-0000i-of-0000N.gguf``), else None."""
    m = SHARD_RE.match(os.path.basename(path))
    if m is None or m.group("ext") != ".gguf" or int(m.group("count")) != count:
        return None
    return _numbered_set(path, m, named=path).files
