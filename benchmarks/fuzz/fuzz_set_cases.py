"""Hypothesis strategies that turn a good sharded model (a safetensors set with its
``model.safetensors.index.json``, a gguf-split set) into hostile sets.

A set case is a whole model directory: each member as (name, header bytes, size) — written as the
header followed by a hole, like the single-file cases — plus symbolic links and FIFOs, and the path
the case is opened by (the directory, the index, or one shard). Mutations:

- the index's ``weight_map`` values: a file outside the directory (``../``, absolute, a link out of it),
  another shard, a missing file, odd spellings (``./x``, ``x/``, ``sub/../x``), empty, NUL, backslash,
  5000 characters, any JSON value; its keys: renamed (odd names), deleted, added, duplicated;
  ``metadata.total_size``: edges, off by one, odd numbers (NaN, 1e999, 5000 digits, floats, strings);
  the JSON structure: weight_map or metadata replaced by any JSON value, the document replaced,
  truncated, trailing garbage, deep nesting;
- a split's ``split.no`` / ``split.count`` / ``split.tensors.count``: edge values, the key renamed
  (missing) or given twice, its type changed, or any GGUF header mutation (fuzz_gguf_cases) on one split;
- the layout: a member deleted, replaced by a link out of the directory, by a link to another member,
  by a FIFO (an open would block), or by a copy of another member (a split's number twice).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import strategies as st

from fuzz_gguf_cases import WIDTH, encode, mutated_gguf, tokenize
from fuzz_st_cases import Obj, Raw, dump, name_key, odd_json, odd_scalars
from fuzz_values import interesting_ints

ST_INDEX = "model.safetensors.index.json"
OUTSIDE = "outside"  # beside each case directory: bait files no case may open
BAIT = "bait.safetensors"
SPLIT_KEYS = (b"split.no", b"split.count", b"split.tensors.count")


@dataclass(frozen=True)
class Member:
    name: str
    head: bytes  # the whole file for an index; header (through its padding) for a shard
    size: int


@dataclass(frozen=True)
class SetBase:
    name: str
    format: str
    members: tuple[Member, ...]  # the index (if any) first, then shards in order

    @property
    def shards(self) -> list[Member]:
        return [m for m in self.members if m.name != ST_INDEX]


@dataclass(frozen=True)
class SetCase:
    kind: str  # index / split / layout
    base: str
    members: tuple[Member, ...]
    links: tuple[tuple[str, str], ...] = ()  # (name, target): a symbolic link in the case directory
    fifos: tuple[str, ...] = ()
    named: str = ""  # what the case is opened by: "" (the directory) or a member's name
    note: str = ""

    @property
    def head(self) -> bytes:  # what the report calls the case's header: every member's, together
        return b"".join(m.head for m in self.members)

    @property
    def size(self) -> int:
        return sum(m.size for m in self.members)


def set_base(directory: Path, name: str) -> SetBase:
    """A base from a good set on disk: the index as is, each shard's header (its data is a hole)."""
    from workbench.formats import open_index

    index = open_index(directory)
    text = Path(index.index_file).read_bytes() if index.index_file else b""
    members = [Member(ST_INDEX, text, len(text))] if index.index_file else []
    for f in index.files:
        with open(f.path, "rb") as fh:
            members.append(Member(f.name, fh.read(f.data_offset), f.size))
    return SetBase(name, index.format, tuple(members))


def write_set_case(case: SetCase, directory: Path) -> Path:
    """Lay the case out in ``directory`` (emptied first); returns the path to open it by."""
    for entry in os.scandir(directory) if directory.exists() else ():
        os.unlink(entry.path)
    directory.mkdir(parents=True, exist_ok=True)
    for m in case.members:
        fd = os.open(directory / m.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, m.head[:m.size])
            os.ftruncate(fd, m.size)
        finally:
            os.close(fd)
    for name, target in case.links:
        os.symlink(target, directory / name)
    for name in case.fifos:
        os.mkfifo(directory / name)
    return directory / case.named if case.named else directory


def bait_targets(directory: Path) -> list[str]:
    """Spellings of the bait outside the case directory a hostile member may use."""
    bait = directory.parent / OUTSIDE / BAIT
    return [f"../{OUTSIDE}/{BAIT}", str(bait), f"./../{OUTSIDE}/{BAIT}", f"{directory.name}/../../{OUTSIDE}/{BAIT}"]


# --- the index file ----------------------------------------------------------------------------


def _doc(base: SetBase) -> Obj:
    return json.loads(base.members[0].head, object_pairs_hook=Obj)


def _get(pairs: Obj, key: str) -> Obj | None:
    return next((v for k, v in pairs if k == key and isinstance(v, Obj)), None)


@st.composite
def wm_value(draw, base: SetBase, wmap: Obj, directory: Path) -> str:
    i = draw(st.integers(0, len(wmap) - 1))
    shards = [m.name for m in base.shards]
    value = draw(st.one_of(
        st.sampled_from(bait_targets(directory) + ["link.safetensors", "nothere.safetensors", "", ".", "..",
                                                   "a\0b.safetensors", "a\\b.safetensors", "x" * 5000]),
        st.sampled_from(shards), st.sampled_from(shards).map(lambda s: f"./{s}"),
        st.sampled_from(shards).map(lambda s: f"{s}/"), st.sampled_from(shards).map(lambda s: f"sub/../{s}"),
        odd_json()))
    wmap[i] = (wmap[i][0], value)
    return f"weight_map value {str(value)[:40]!r}"


@st.composite
def wm_key(draw, base: SetBase, wmap: Obj, directory: Path) -> str:
    i = draw(st.integers(0, len(wmap) - 1))
    how = draw(st.sampled_from(["rename", "delete", "add", "duplicate"]))
    if how == "rename":
        wmap[i] = (draw(name_key([k for k, _ in wmap])), wmap[i][1])
    elif how == "delete":
        del wmap[i]
    elif how == "add":
        wmap.insert(i, (draw(st.text(max_size=12)), draw(st.sampled_from([m.name for m in base.shards]))))
    else:
        wmap.insert(draw(st.integers(0, len(wmap))), (wmap[i][0], draw(st.sampled_from([m.name for m in base.shards]))))
    return f"weight_map key {how}"


@st.composite
def total_size(draw, doc: Obj) -> str:
    meta = _get(doc, "metadata")
    if meta is None:
        return "total_size (no metadata)"
    old = next((v for k, v in meta if k == "total_size"), 0)
    old = old if type(old) is int and 0 <= old < 1 << 64 else 0  # an earlier mutation may have changed it
    value = draw(st.one_of(interesting_ints(8, old), odd_scalars(),
                           st.sampled_from([old + 1, old - 1, -old, float(old)])))
    meta[:] = [(k, value if k == "total_size" else v) for k, v in meta] or [("total_size", value)]
    return f"total_size {str(value)[:24]}"


@st.composite
def mutated_index(draw, base: SetBase, directory: Path) -> SetCase:
    doc = _doc(base)
    wmap = _get(doc, "weight_map")
    done = []
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["value", "value", "key", "total", "structure"]))
        if how == "total":
            done.append(draw(total_size(doc)))
        elif how == "structure":
            key = draw(st.sampled_from(["weight_map", "metadata"]))
            doc[:] = [(k, draw(odd_json()) if k == key else v) for k, v in doc]
            done.append(f"{key} replaced")
        elif wmap:
            done.append(draw((wm_value if how == "value" else wm_key)(base, wmap, directory)))
    body: object = doc
    if draw(st.integers(0, 19)) == 0:
        body, done = draw(odd_json()), done + ["document replaced"]
    text = dump(body) + draw(st.sampled_from([b""] * 8 + [b"}", b"\xff", b",", b"\n"]))
    if draw(st.integers(0, 14)) == 0:
        text, done = text[:draw(st.integers(0, len(text)))], done + ["truncated"]
    members = (Member(ST_INDEX, text, len(text)),) + base.members[1:]
    links = (("link.safetensors", f"../{OUTSIDE}/{BAIT}"),)
    named = draw(st.sampled_from(["", ST_INDEX, base.shards[0].name, base.shards[-1].name]))
    return SetCase("index", base.name, members, links, named=named, note="; ".join(done))


# --- a split's keys ----------------------------------------------------------------------------


@st.composite
def mutated_split(draw, base: SetBase) -> SetCase:
    i = draw(st.integers(0, len(base.shards) - 1))
    split = base.shards[i]
    if draw(st.integers(0, 3)) == 0:  # anything fuzz_gguf_cases does, to one split of the set
        head, note = draw(mutated_gguf(split.head))
    else:
        toks = tokenize(split.head)
        keys = [j for j, t in enumerate(toks) if t.label.endswith(".key") and t.value in SPLIT_KEYS]
        j = draw(st.sampled_from(keys))
        how = draw(st.sampled_from(["value", "value", "rename", "type", "twice"]))
        if how == "value":  # the value follows the key's type token
            width = WIDTH[toks[j + 2].kind]
            toks[j + 2] = replace(toks[j + 2], value=draw(interesting_ints(width, toks[j + 2].value)))
        elif how == "rename":
            toks[j] = replace(toks[j], value=toks[j].value[:-1] + b"X")
        elif how == "type":
            toks[j + 1] = replace(toks[j + 1], value=draw(st.sampled_from([0, 4, 5, 6, 7, 8, 10, 12])))
        else:
            toks[j + 3:j + 3] = toks[j - 1:j + 3]
            toks[3] = replace(toks[3], value=toks[3].value + 1)
        head, note = encode(toks, "<", repad=True), f"{toks[j].value.decode()} {how}"
    members = list(base.members)
    members[i] = Member(split.name, head, max(0, split.size + len(head) - len(split.head)))
    named = draw(st.sampled_from(["", base.shards[0].name, base.shards[-1].name]))
    return SetCase("split", base.name, tuple(members), named=named, note=f"split {i}: {note}")


# --- the layout --------------------------------------------------------------------------------


@st.composite
def mutated_layout(draw, base: SetBase, directory: Path) -> SetCase:
    members, links, fifos = list(base.members), [], []
    shards = [m.name for m in base.shards]
    victim = draw(st.sampled_from(shards + [m.name for m in base.members if m.name == ST_INDEX]))
    how = draw(st.sampled_from(["delete", "link-out", "link-member", "fifo", "copy"]))
    keep = [m for m in members if m.name != victim]
    if how == "link-out":
        links.append((victim, draw(st.sampled_from(bait_targets(directory)))))
    elif how == "link-member":
        links.append((victim, draw(st.sampled_from([s for s in shards if s != victim] or shards))))
    elif how == "fifo":
        fifos.append(victim)
    elif how == "copy":
        source_name = draw(st.sampled_from(shards))
        source = next(m for m in members if m.name == source_name)
        keep.append(Member(victim, source.head, source.size))
    named = draw(st.sampled_from(["", shards[0], shards[-1]] + ([ST_INDEX] if base.members[0].name == ST_INDEX else [])))
    return SetCase("layout", base.name, tuple(keep), tuple(links), tuple(fifos), named, f"{victim} {how}")


def set_cases(bases: list[SetBase], directory: Path) -> st.SearchStrategy[SetCase]:
    """Every kind of set case over every base (index mutations for indexed sets, key mutations for
    gguf-split sets), weighted towards the index and the split keys."""
    indexed = [b for b in bases if b.members[0].name == ST_INDEX]
    split = [b for b in bases if b.format == "gguf"]
    kinds = [st.sampled_from(bases).flatmap(lambda b: mutated_layout(b, directory))]
    if indexed:
        kinds += [st.sampled_from(indexed).flatmap(lambda b: mutated_index(b, directory))] * 3
    if split:
        kinds += [st.sampled_from(split).flatmap(mutated_split)] * 2
    return st.one_of(kinds)
