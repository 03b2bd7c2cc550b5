"""The model a measurement is about — one file or a set of files — as the runner needs it: resolved once
per measurement, its page-cache state set and checked over every file before each run, its identity
(the set's) for the ledger, and the line a command prints about it.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

from workbench.errors import CacheStateError, WorkbenchError

if TYPE_CHECKING:
    from workbench.io.modelcache import ModelFiles, ModelResidency
    from workbench.records import RunRecord

    Model = Union[str, ModelFiles]

WARM_MIN = 0.98  # resident fraction that counts as warm (pagecache.prepare's default too)
COLD_MAX = 0.02  # resident fraction that still counts as cold (pagecache.prepare's default too)


@dataclass(frozen=True)
class CachePrepared:
    """What preparing the page cache before a run gave: the model's resident fraction and each file's
    (file name → fraction; empty when it could not be measured), whether the state was reached, and
    the one line saying why not."""

    resident: float | None
    reached: bool
    error: str | None = None
    files: Mapping[str, float] = field(default_factory=dict)


def resolve_model(path: str) -> Model:
    """The model's files (a file the workbench cannot index is a model of one file: an external
    engine's own format); the path itself when it does not resolve, so that preparing the cache and
    the run itself each say why."""
    from workbench.io.modelcache import model_files

    try:
        return model_files(path, any_file=True)
    except (OSError, WorkbenchError):
        return path


def prepare_cache(model: Model, state: str) -> CachePrepared:
    """Set the page-cache state of every file of ``model`` and check it with mincore."""
    from workbench.io.modelcache import prepare_model

    try:
        got = prepare_model(model, state, warm_min=WARM_MIN, cold_max=COLD_MAX, any_file=True)
        return CachePrepared(got.resident, True, None, got.by_name())
    except (CacheStateError, OSError, WorkbenchError) as exc:  # a missing shard too: the worker says so as well
        seen = _residency(model)
        if seen is None:
            resident = exc.resident if isinstance(exc, CacheStateError) and _one_file(model) else None
            return CachePrepared(resident, False, str(exc))
        return CachePrepared(seen.resident, False, str(exc), seen.by_name())


def cache_request(state: str) -> dict[str, Any]:
    """What the worker is told of the state :func:`prepare_cache` set, to hold it once more just before
    its window (``io/cache_recheck.py``)."""
    return {"state": state, "warm_min": WARM_MIN, "cold_max": COLD_MAX}


def recheck_note(runs: Sequence[RunRecord]) -> str:
    """``2/5 runs: warm decayed before the load window …`` — the runs whose verified state was lost
    between the runner's check and the worker's (reclaim), the worst of them in full; '' for none."""
    decayed = [r.report.cache_recheck for r in runs
               if r.report.cache_recheck is not None and r.report.cache_recheck.decayed]
    if not decayed:
        return ""
    worst = min(decayed, key=lambda c: c.seen) if decayed[0].state == "warm" else max(decayed, key=lambda c: c.seen)
    return f"{len(decayed)}/{len(runs)} runs: {worst.line()}"


def _residency(model: Model) -> ModelResidency | None:
    """What is resident of the model's files that can still be measured (a deleted shard is left out:
    the run records what there was); None when none can."""
    from workbench.io.modelcache import FileResidency, ModelResidency, model_residency
    from workbench.io.pagecache import resident_fraction

    try:
        return model_residency(model, any_file=True)
    except (OSError, WorkbenchError):
        if isinstance(model, str):
            return None
    seen = []
    for path, size in zip(model.paths, model.sizes):
        try:
            seen.append(FileResidency(path, size, resident_fraction(path)))
        except (OSError, WorkbenchError):
            continue
    return ModelResidency(tuple(seen)) if seen else None


def _one_file(model: Model) -> bool:
    return isinstance(model, str) or len(model.paths) == 1


def recorded_identity(model: Model) -> dict[str, Any]:
    """The model's identity as an attempt records it — a set's over its members and index file
    (:func:`workbench.io.identity.model_identity`), a file's over its bytes; the path and the error
    when it cannot be read (a missing file is a failed attempt, still recorded)."""
    from workbench.io.identity import file_identity, model_identity
    from workbench.io.modelcache import model_files

    try:
        files = model_files(model, any_file=True)
        ident = model_identity(files.index) if files.index is not None else file_identity(files.path)
        return asdict(ident)
    except (OSError, WorkbenchError) as exc:
        return {"path": str(getattr(model, "path", model)), "error": str(exc)}


def identity_members(identity: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model's files as an attempt's environment keeps them: each one's logical name (as the index or
    the directory names it), the path its bytes were read from (a hub snapshot's blob), size and hash;
    a one-file model's file itself; [] for an identity that could not be read."""
    members = identity.get("files") or ([identity] if identity.get("hash") else [])
    return [{"name": os.path.basename(str(m.get("path", ""))), "read": m.get("read_path") or m.get("path"),
             "size": m.get("size"), "hash": m.get("hash")} for m in members]


def model_directory(model: Model) -> str:
    """The directory the model's files live in (a directory model is that directory, not its parent)."""
    if not isinstance(model, str):
        return model.directory
    path = os.path.abspath(model)
    return path if os.path.isdir(path) else os.path.dirname(path)


def model_name(path: str) -> str:
    """What labels call a model (:func:`workbench.records.model_display_name`): of the path it
    resolves to (a directory's index, set or file), else of the path itself."""
    from workbench.records import model_display_name

    model = resolve_model(path)
    return model.name if not isinstance(model, str) else model_display_name(path)


def describe_sets(paths: list[str]) -> list[str]:
    """``model: DIR (4 files, 16.06 GB)`` for each model of several files, or named by its directory,
    among ``paths``; under it the files resolved and the weights files the directory held beside them,
    each with why it was left out (``left out: model.fp16.safetensors (the fp16 variant …)``)."""
    from workbench.formats.resolve import resolve_model as resolve_spec
    from workbench.formats.variants import grouped

    lines = []
    for path in dict.fromkeys(paths):
        model = resolve_model(path)
        if isinstance(model, str) or model.index is None:
            continue
        left = resolve_spec(path).left_out
        if model.index.sharded or model.index.index_file or left or os.path.isdir(path):
            index = os.path.basename(model.index.index_file)
            names = [os.path.basename(p) for p in model.paths if os.path.basename(p) != index]
            shown = (f"{index} → " if index else "") + ", ".join(key for key, _ in grouped(names))
            lines += [f"model: {model.describe(path)}", f"  resolved: {shown}"]
            lines += [f"  left out: {'; '.join(f'{name} ({why})' for name, why in left)}"] if left else []
    return lines


class Models:
    """The models of one measurement: each resolved once (its files), identified once (at its first
    attempt), and checked again at the end — runs of two different sets must never be paired."""

    def __init__(self) -> None:
        self._files: dict[str, ModelFiles] = {}
        self._identity: dict[str, dict[str, Any]] = {}
        self._changed: dict[str, str] = {}

    def files(self, path: str) -> Model:
        """The model's files (kept once resolved), else the path (see :func:`resolve_model`)."""
        if path not in self._files:
            model = resolve_model(path)
            if isinstance(model, str):
                return model
            self._files[path] = model
        return self._files[path]

    def identity(self, path: str) -> dict[str, Any]:
        """The model's identity as recorded at its first attempt."""
        if path not in self._identity:
            self._identity[path] = recorded_identity(self.files(path))
        return self._identity[path]

    def same(self, a: str, b: str) -> bool:
        """Whether two models are the same bytes (one file, or one set by its members); unknown
        (a model that could not be read) counts as the same: its runs failed anyway."""
        ha, hb = self.identity(a).get("hash"), self.identity(b).get("hash")
        return not ha or not hb or ha == hb

    def changed(self, path: str) -> str:
        """Why the model is not what its attempts recorded any more ('' when it is): a member
        rewritten, added or deleted while it was being measured."""
        if path not in self._identity or not self._identity[path].get("hash"):
            return ""
        if path not in self._changed:  # once per model: identity is stat-cached, a changed file rehashed
            before, now = self._identity[path], recorded_identity(path)
            what = now.get("error") or f"{before['hash'][:24]}… → {str(now.get('hash'))[:24]}…"
            self._changed[path] = "" if now.get("hash") == before.get("hash") else (
                f"the model changed during the measurement ({what}): its runs are not of one set of bytes")
        return self._changed[path]

    def canonical(self, path: str) -> str:
        """The path the model resolves to (a set's index file or first shard), for matching walls."""
        model = self.files(path)
        return model if isinstance(model, str) else model.path


def model_facts(path: str) -> dict[str, Any] | None:
    """What ``workbench env`` adds when ``path`` names a model of several files: the set, and the file
    system(s) its files really live on (a hub cache's links lead into its blobs directory); None else."""
    from workbench.io.pagecache import mount_of

    model = resolve_model(path)
    if isinstance(model, str) or model.index is None or not (model.index.sharded or model.index.index_file):
        return None
    places = sorted({"{} on {}".format(*mount_of(os.path.realpath(p))[:2]) for p in model.paths})
    return {"set": model.describe(path), "files": model.n_data_files, "bytes": model.data_bytes,
            "file_systems": places}
