"""Page-cache control over a model — every file of it: one file, a sharded safetensors set with its
index, or a gguf-split set.

A run's cache state is the model's: cold means every file evicted and verified with mincore, warm every
file resident, asis measured. :func:`prepare_model` sets the state file by file with
:func:`workbench.io.pagecache.prepare` (so a state that cannot be reached raises a
:class:`~workbench.errors.CacheStateError` naming the file that could not reach it) and then checks the
whole set once more: reading the third shard may push the first one out again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Union

from workbench.errors import CacheStateError, FormatError
from workbench.formats.index import TensorIndex
from workbench.io.cache_recheck import fill_missing_pages
from workbench.io.pagecache import STATES, page_size, prepare, resident_fraction
from workbench.records import model_display_name


@dataclass(frozen=True)
class ModelFiles:
    """The files that make up a model's cache state: its data files in model order, then its index
    file (``model.safetensors.index.json``), if it has one.

    ``path`` is the model as resolved (:attr:`TensorIndex.path`); ``index`` is None for a file the
    workbench cannot index (an engine's own format, timed by ``workbench external``).
    """

    path: str
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    index: TensorIndex | None = None

    @property
    def data_bytes(self) -> int:
        """Bytes of the data files (the index file not counted): what a whole-model read moves."""
        n = len(self.index.files) if self.index is not None else len(self.paths)
        return sum(self.sizes[:n])

    @property
    def n_data_files(self) -> int:
        return len(self.index.files) if self.index is not None else len(self.paths)

    @property
    def directory(self) -> str:
        """The directory the model's files live in."""
        return os.path.dirname(self.paths[0])

    @property
    def name(self) -> str:
        """What a label calls the model (:func:`workbench.records.model_display_name`)."""
        return model_display_name(self.path)

    def describe(self, shown: str | None = None) -> str:
        """``DIR (4 files, 16.06 GB)``: the model (as ``shown``, else its path) and its set."""
        n = self.n_data_files
        return f"{shown or self.path} ({n} file{'s' if n != 1 else ''}, {self.data_bytes / 1e9:.2f} GB)"


ModelLike = Union[str, "os.PathLike[str]", TensorIndex, ModelFiles]


def model_files(model: ModelLike, *, any_file: bool = False) -> ModelFiles:
    """Resolve ``model`` (a path as :func:`workbench.formats.open_index` takes it, an index, or
    ModelFiles) to its files.

    With ``any_file``, a regular file the workbench cannot index is a model of that one file; a set
    that is broken (a missing shard) still raises its FormatError.
    """
    if isinstance(model, ModelFiles):
        return model
    if isinstance(model, TensorIndex):
        index = model
    else:
        from workbench.formats import open_index

        path = os.path.abspath(os.fspath(model))
        try:
            index = open_index(path)
        except FormatError as exc:
            if not (any_file and exc.path == path and os.path.isfile(path)):
                raise
            return ModelFiles(path, (path,), (os.path.getsize(path),))
    paths = tuple(f.path for f in index.files) + ((index.index_file,) if index.index_file else ())
    sizes = tuple(f.size for f in index.files)
    if index.index_file:
        sizes += (_size(index.index_file),)
    return ModelFiles(index.path, paths, sizes, index)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file") from None


@dataclass(frozen=True)
class FileResidency:
    """One file's share of the page cache: ``resident`` is the fraction of its pages in it."""

    path: str
    size: int
    resident: float

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def pages(self) -> int:
        return -(-self.size // page_size())


@dataclass(frozen=True)
class ModelResidency:
    """The page-cache residency of every file of a model, and of the model as a whole."""

    files: tuple[FileResidency, ...]

    @property
    def resident(self) -> float:
        """The model's fraction: resident pages over all pages of every file (1.0 for no pages)."""
        pages = sum(f.pages for f in self.files)
        if not pages:
            return min((f.resident for f in self.files), default=1.0)
        return sum(f.resident * f.pages for f in self.files) / pages

    def by_name(self) -> dict[str, float]:
        """File name → resident fraction (the files of a model share one directory)."""
        return {f.name: f.resident for f in self.files}

    def to_json(self) -> dict[str, Any]:
        return {"resident": self.resident, "files": self.by_name()}


def model_residency(model: ModelLike, *, any_file: bool = False) -> ModelResidency:
    """mincore over every file of ``model`` (nothing is read or faulted in)."""
    files = model_files(model, any_file=any_file)
    return ModelResidency(tuple(FileResidency(p, s, resident_fraction(p)) for p, s in zip(files.paths, files.sizes)))


def prepare_model(model: ModelLike, state: str, *, cold_max: float = 0.02, warm_min: float = 0.98,
                  any_file: bool = False) -> ModelResidency:
    """Put every file of ``model`` in ``state`` ("cold", "warm" or "asis") and verify it with mincore.

    Warm reads only the missing pages of a file already resident; after any file was read in full the
    whole set is checked again.

    Returns
    -------
    ModelResidency
        Per file and for the model, as measured after preparing.

    Raises
    ------
    CacheStateError
        Naming the file that could not reach the state (a memory file system, pages pinned by a
        mapping, a set larger than free memory), or whose residency mincore cannot see.
    FormatError
        A model that no longer resolves, or one of its files gone.
    """
    if state not in STATES:
        raise CacheStateError(_path_of(model), state, f"unknown cache state; expected one of {', '.join(STATES)}")
    files = model_files(model, any_file=any_file)
    got, read = [], False
    for path, size in zip(files.paths, files.sizes):
        already = _resident(path, state) if state == "warm" and size else None
        if already is not None and already >= warm_min:  # re-reading a resident file costs a whole read
            if already < 1.0:  # but its holes may all sit in one tensor: read just those (cache_recheck.py)
                fill_missing_pages(path)
                already = _resident(path, state)
            if already >= warm_min:
                got.append(FileResidency(path, size, already))
                continue
        read |= state == "warm"
        got.append(FileResidency(path, size, float(prepare(path, state, cold_max=cold_max, warm_min=warm_min))))
    result = ModelResidency(tuple(got))
    if read and len(got) > 1:
        result = _still_warm(files, warm_min)
    return result


def _resident(path: str, state: str) -> float:
    try:
        return resident_fraction(path)
    except CacheStateError as exc:  # mincore blind to this file: say which state could not be checked
        raise CacheStateError(path, state, exc.detail) from None


def _still_warm(files: ModelFiles, warm_min: float) -> ModelResidency:
    """Every file once more, after the others were read: a set larger than free memory evicts its
    own first files while the last ones are read."""
    now = ModelResidency(tuple(FileResidency(p, s, resident_fraction(p)) for p, s in zip(files.paths, files.sizes)))
    for f in now.files:
        if f.size and f.resident < warm_min:
            avail = os.sysconf("SC_AVPHYS_PAGES") * page_size()
            raise CacheStateError(f.path, "warm", f"only {f.resident:.1%} still resident after the other "
                                  f"{len(files.paths) - 1} files of the model were read ({sum(files.sizes) / 2**30:.2f} "
                                  f"GiB in all, {avail / 2**30:.2f} GiB free memory); needed {warm_min:.1%}",
                                  f.resident)
    return now


def _path_of(model: ModelLike) -> str:
    if isinstance(model, (TensorIndex, ModelFiles)):
        return model.path
    return os.fspath(model)
