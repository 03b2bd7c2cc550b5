"""Shared fixtures. Add new ones additively; keep files small (KiB to a few MiB)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pytest

from workbench.formats.index import TensorIndex, TensorInfo


_DREW_NONE = False  # whether this suite, not the user, turned static figures off


def pytest_configure(config: pytest.Config) -> None:
    """Static images (kaleido in a headless Chromium: ~6 s to start, once per notebook, report or export)
    are drawn only in the tests marked ``static_figures``, which test them; every other test's notebooks
    and reports say "static images not drawn". A ``WORKBENCH_BROWSER`` set by the user is left alone."""
    global _DREW_NONE
    from workbench import defaults

    if defaults.BROWSER not in os.environ:
        os.environ[defaults.BROWSER] = "none"
        _DREW_NONE = True


@pytest.fixture(autouse=True)
def _static_figures_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench import defaults

    if _DREW_NONE and request.node.get_closest_marker("static_figures") is not None:
        monkeypatch.delenv(defaults.BROWSER)


@pytest.fixture(scope="session")
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Point WORKBENCH_CACHE_DIR (file identities, reference checksums) at a session temp dir."""
    path = tmp_path_factory.mktemp("wb-cache")
    old = os.environ.get("WORKBENCH_CACHE_DIR")
    os.environ["WORKBENCH_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("WORKBENCH_CACHE_DIR", None)
    else:
        os.environ["WORKBENCH_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def synth_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., TensorIndex]:
    """``synth_model(format, layout, alignment=32, size=3 MiB, experts=8)`` → index of a synthetic file,
    written once per argument set for the whole session."""
    from workbench.formats.synth import write_synthetic

    root = tmp_path_factory.mktemp("synth")
    made: dict[tuple, TensorIndex] = {}

    def make(format: str, layout: str, alignment: int = 32, size: int = 3 << 20, experts: int = 8) -> TensorIndex:
        key = (format, layout, alignment, size, experts)
        if key not in made:
            path = root / f"{format}-{layout}-a{alignment}-s{size}-e{experts}.{format}"
            made[key] = write_synthetic(path, format=format, layout=layout, size=size,
                                        experts=experts, alignment=alignment, seed=len(made))
            fd = os.open(path, os.O_RDONLY)
            try:  # dirty pages cannot be evicted: write them back so cold/evict tests mean something
                os.fsync(fd)
            finally:
                os.close(fd)
        return made[key]

    return make


@pytest.fixture(scope="session")
def sharded_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., TensorIndex]:
    """``sharded_model(format, layout, shards=3, size=3 MiB, alignment=32, experts=8)`` → index of a
    synthetic sharded set (safetensors shards + model.safetensors.index.json, or a gguf-split set),
    written once per argument set for the whole session, every file written back to disk."""
    from workbench.formats.synth import write_synthetic

    root = tmp_path_factory.mktemp("sharded")
    made: dict[tuple, TensorIndex] = {}

    def make(format: str, layout: str, shards: int = 3, size: int = 3 << 20, alignment: int = 32,
             experts: int = 8) -> TensorIndex:
        key = (format, layout, shards, size, alignment, experts)
        if key not in made:
            out = root / f"{format}-{layout}-n{shards}-a{alignment}-s{size}-e{experts}"
            made[key] = write_synthetic(out, format=format, layout=layout, size=size, experts=experts,
                                        alignment=alignment, seed=len(made), shards=shards)
            for f in made[key].files:
                fd = os.open(f.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return made[key]

    return make


def write_raw_model(path: Path, sizes: Sequence[int], *, first: int = 0, gap: int = 0,
                    tail: int = 0, seed: int = 0) -> TensorIndex:
    """A file of random bytes and a hand-made index over it: tensors of ``sizes`` bytes starting at
    ``first``, ``gap`` bytes apart, ``tail`` bytes after the last. For layouts no format produces."""
    tensors, off = [], first
    for i, n in enumerate(sizes):
        tensors.append(TensorInfo(f"t{i:03d}", off, n, "u8", (n,)))
        off += n + gap
    size = off - gap + tail if sizes else first + tail
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    with open(path, "wb") as fh:
        fh.write(data.tobytes())
        fh.flush()
        os.fsync(fh.fileno())
    return TensorIndex(str(path), "raw", size, first, 1, tuple(tensors))


@pytest.fixture
def raw_model(tmp_path: Path) -> Callable[..., TensorIndex]:
    """``raw_model(sizes, first=0, gap=0, tail=0, seed=0)`` → index over a random file in tmp_path."""
    count = [0]

    def make(sizes: Sequence[int], **kw: int) -> TensorIndex:
        count[0] += 1
        return write_raw_model(tmp_path / f"raw{count[0]}.bin", sizes, **kw)

    return make


def write_raw_set(directory: Path, specs: Sequence[dict]) -> TensorIndex:
    """A model of several random files and a hand-made index over them, one file per spec (the keys of
    :func:`write_raw_model`: ``sizes``, ``first``, ``gap``, ``tail``, ``seed``): files with their own
    data offsets and tensors at odd offsets, for layouts no format writer produces. Tensor ``j.tNNN``
    lives in file ``j``; every file is written back to disk, and its stat recorded (drift checks apply)."""
    from workbench.formats.index import ModelFile

    directory.mkdir(parents=True, exist_ok=True)
    files, tensors = [], []
    for j, spec in enumerate(specs):
        spec = {"seed": j, **spec}
        one = write_raw_model(directory / f"part-{j}.bin", spec.pop("sizes"), **spec)
        st = os.stat(one.path)
        files.append(ModelFile(one.path, "raw", one.size, one.data_offset, 1, len(one),
                               *one.files[0].data_range, st.st_mtime_ns, st.st_ino))
        tensors += [TensorInfo(f"{j}.{t.name}", t.offset, t.nbytes, t.dtype, t.shape, t.file) for t in one]
    first = files[0]
    return TensorIndex(first.path, "raw", sum(f.size for f in files), first.data_offset, 1, tuple(tensors),
                       mtime_ns=first.mtime_ns, inode=first.inode, files=tuple(files))


@pytest.fixture
def raw_set(tmp_path: Path) -> Callable[..., TensorIndex]:
    """``raw_set([{sizes, first, gap, tail, seed}, ...])`` → index over a set of random files in tmp_path."""
    count = [0]

    def make(specs: Sequence[dict]) -> TensorIndex:
        count[0] += 1
        return write_raw_set(tmp_path / f"set{count[0]}", specs)

    return make


@pytest.fixture(scope="session")
def dtype_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], TensorIndex]:
    """``dtype_model(kind)`` → index of a hand-written safetensors file: ``bf16`` (an LLM's dtype),
    ``mixed`` / ``exotic`` / ``rare`` (many dtype codes, tensors at odd offsets); see safetensors_files.py."""
    import safetensors_files
    from workbench.formats import open_index

    made: dict[str, TensorIndex] = {}

    def make(kind: str) -> TensorIndex:
        if kind not in made:
            path = tmp_path_factory.mktemp("dtypes") / f"{kind}.safetensors"
            made[kind] = open_index(str(safetensors_files.write_file(path, safetensors_files.KINDS[kind])))
        return made[kind]

    return make
