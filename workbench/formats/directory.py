"""Which model a directory holds, decided the way the Hub's loaders decide it — by file names alone.

safetensors: ``model.safetensors.index.json``, else ``model.safetensors``, else the one complete
``<prefix>-0000i-of-0000N.safetensors`` set (through its index when one is named for it) or the one
other ``*.safetensors.index.json``, else the only ``.safetensors`` file. Where the loaders disagree —
``model.safetensors`` beside ``model.safetensors.index.json`` or beside a complete shard set
(transformers takes the single file first, vLLM the index's files or every ``*.safetensors``) — nothing
is chosen: the refusal names both and how to name one. A dtype variant (``model.fp16.safetensors``,
shards under ``model.safetensors.index.fp16.json``: variants.py) is what transformers loads only with
``variant=``, so a directory never means one; a directory of variants only is refused, naming them.
GGUF, when the directory holds no safetensors: the one complete split set or the one model file;
llama.cpp's multimodal projector (``mmproj-*.gguf``) is never part of the model. An adapter
(``adapter_model.safetensors``), a variant or a ``consolidated.safetensors`` beside the model is not
part of it (resolve.py lists them as left out). Anything else is refused in one line that lists the
candidates and how to name one. Nothing here opens or stats a file: the names decide, and the members
chosen are then confined and checked by :mod:`workbench.formats.resolve`, so a file that is not chosen
is never read, evicted or hashed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from workbench.errors import FormatError
from workbench.formats.variants import PICKLE_EXTS, variant_index, variants_of

ST_INDEX = "model.safetensors.index.json"
ST_DEFAULT = "model.safetensors"
_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})(?P<ext>\.safetensors|\.gguf)$")
_ST_INDEX = re.compile(r"^(?P<stem>.+)\.safetensors\.index(?:\.(?P<variant>[^.]+))?\.json$")
SHOWN = 6  # candidates named in a refusal


@dataclass(frozen=True)
class Choice:
    """The directory's model: ``kind`` "index" (``name`` the index file), "file" (the file) or "set"
    (``name`` its first member, found by its siblings' names)."""

    kind: str
    name: str


@dataclass(frozen=True)
class _Set:
    prefix: str
    count: int
    ext: str
    present: frozenset[int]

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}-{i:05d}-of-{self.count:05d}{self.ext}" for i in range(1, self.count + 1)]

    @property
    def complete(self) -> bool:
        return len(self.present) == self.count


    def describe(self) -> str:
        shown = f"{self.prefix}-0000i-of-{self.count:05d}{self.ext}"
        if self.complete:
            return f"{shown} (a {self.count}-file set)"
        missing = [n for i, n in enumerate(self.names, 1) if i not in self.present]
        return f"{shown} (incomplete: {len(self.present)} of {self.count}, missing {missing[0]}" + \
            (f" and {len(missing) - 1} more)" if len(missing) > 1 else ")")


def set_index_names(prefix: str) -> tuple[str, ...]:
    """The index names writers give the safetensors set ``<prefix>-0000i-of-0000N``: huggingface_hub's
    ``model.safetensors.index.json`` for ``model-*``, transformers' ``model.safetensors.index.fp16.json``
    for the variant ``model.fp16-*``."""
    stem, _, variant = prefix.partition(".")
    names = [f"{prefix}.safetensors.index.json"]
    if variant:
        names.append(f"{stem}.safetensors.index.{variant}.json")
    return tuple(names)


def choose_model(directory: str, names: list[str]) -> Choice:
    """The model among ``names`` (the directory's entries that are not directories), or FormatError."""
    names = sorted(names)
    variants = variants_of(names)
    plain = [n for n in names if n not in variants]
    st_files = [n for n in plain if n.endswith(".safetensors")]
    complete = [s for s in _group(st_files)[0] if s.complete]
    if ST_DEFAULT in plain and (ST_INDEX in plain or complete):
        other = f"{ST_INDEX} (its set)" if ST_INDEX in plain else complete[0].describe()
        raise _loaders_disagree(directory, other, ST_INDEX if ST_INDEX in plain else complete[0].names[0])
    if ST_INDEX in plain:
        return Choice("index", ST_INDEX)
    if ST_DEFAULT in plain:
        return Choice("file", ST_DEFAULT)
    st_indexes = [n for n in plain if _ST_INDEX.match(n)]
    if st_files or st_indexes:
        return _choose_safetensors(directory, st_files, st_indexes)
    if any(n.endswith(".safetensors") for n in variants):
        raise _only_variants(directory, names, variants)
    ggufs = [n for n in names if n.endswith(".gguf")]
    projectors = [n for n in ggufs if "mmproj" in n.lower()]
    models = [n for n in ggufs if n not in projectors]
    if models:
        return _choose_gguf(directory, models)
    raise _nothing(directory, names, projectors)


def _choose_safetensors(directory: str, files: list[str], indexes: list[str]) -> Choice:
    sets, singles = _group(files)
    complete = [s for s in sets if s.complete]
    candidates: list[tuple[Choice, str]] = []
    for s in complete:
        own = next((n for n in set_index_names(s.prefix) if n in indexes), None)
        candidates.append((Choice("index", own) if own else Choice("set", s.names[0]), s.describe()))
    matched = {c.name for c, _ in candidates}
    candidates += [(Choice("index", n), f"{n} (an index)") for n in indexes if n not in matched]
    if len(candidates) == 1:
        return candidates[0][0]
    if candidates:
        raise _ambiguous(directory, [d for _, d in candidates])
    return _only(directory, sets, singles)  # no complete set: the only file (or the only set, to say what it lacks)


def _choose_gguf(directory: str, files: list[str]) -> Choice:
    return _only(directory, *_group(files))


def _only(directory: str, sets: list[_Set], singles: list[str]) -> Choice:
    """The one set or file there is; several (an incomplete set among them: the user may mean it) refused."""
    if len(sets) + len(singles) == 1:
        return Choice("set", sets[0].names[0]) if sets else Choice("file", singles[0])
    raise _ambiguous(directory, [s.describe() for s in sets] + singles)


def _group(files: list[str]) -> tuple[list[_Set], list[str]]:
    """Numbered shards grouped into sets (by prefix, count and extension); the other files."""
    found: dict[tuple[str, int, str], set[int]] = {}
    singles = []
    for name in files:
        m = _SHARD.match(name)
        count = int(m.group("count")) if m else 0
        if m and count > 1 and 1 <= int(m.group("no")) <= count:  # 1 of 1 is a file
            found.setdefault((m.group("prefix"), count, m.group("ext")), set()).add(int(m.group("no")))
        else:
            singles.append(name)
    return [_Set(p, c, e, frozenset(no)) for (p, c, e), no in sorted(found.items())], singles


def _loaders_disagree(directory: str, other: str, other_path: str) -> FormatError:
    return FormatError(directory, "path", f"holds both {ST_DEFAULT} and {other}, and the loaders disagree on "
                       f"which is the model (transformers loads {ST_DEFAULT}, vLLM the index's files or every "
                       f"*.safetensors): name one, {os.path.join(directory, ST_DEFAULT)} or "
                       f"{os.path.join(directory, other_path)}")


def _only_variants(directory: str, names: list[str], variants: dict[str, str]) -> FormatError:
    """A directory of dtype variants only: transformers loads none of them without ``variant=``."""
    by_variant: dict[str, list[str]] = {}
    for name in names:
        if name in variants:
            by_variant.setdefault(variants[name], []).append(name)

    def named_by(group: list[str]) -> str:  # a set by its index, else the file
        return ([n for n in group if variant_index(n)] or [n for n in group if not _SHARD.match(n)] or group)[0]

    shown = "; ".join(f"{v}: {named_by(g)}" + (f" and {len(g) - 1} more" if len(g) > 1 else "")
                      for v, g in sorted(by_variant.items()))
    first = named_by(sorted(by_variant.items())[0][1])
    return FormatError(directory, "path", f"holds only dtype variants ({shown}), which transformers loads only "
                       f"with variant=\"<name>\": name the one to measure, its file or its index "
                       f"(e.g. {os.path.join(directory, first)})")


def _ambiguous(directory: str, candidates: list[str]) -> FormatError:
    more = f" and {len(candidates) - SHOWN} more" if len(candidates) > SHOWN else ""
    return FormatError(directory, "path", f"holds no single model: {len(candidates)} candidates "
                       f"({'; '.join(candidates[:SHOWN])}{more}); name one: the file, or a set's index "
                       f"or any of its shards (e.g. {os.path.join(directory, _example(candidates[0]))})")


def _example(candidate: str) -> str:
    """A path the user can name for a candidate as :func:`_ambiguous` describes it."""
    name = candidate.split(" (", 1)[0]
    return name.replace("-0000i-of-", "-00001-of-")


def _nothing(directory: str, names: list[str], projectors: list[str]) -> FormatError:
    pickles = [n for n in names if n.endswith(PICKLE_EXTS)]
    if pickles:
        return FormatError(directory, "path", f"holds only PyTorch pickle checkpoints ({', '.join(pickles[:3])}"
                           f"{'…' if len(pickles) > 3 else ''}), which the workbench does not load: unpickling "
                           "runs arbitrary code; convert them to safetensors (e.g. transformers' "
                           "save_pretrained(..., safe_serialization=True))")
    if projectors:
        return FormatError(directory, "path", f"holds only a multimodal projector ({', '.join(projectors[:3])}), "
                           "which is not a model on its own: name the file to load it anyway")
    return FormatError(directory, "path", "is a directory with no model in it (no model.safetensors.index.json, "
                                          "*.safetensors or *.gguf)")
