"""Shared fixtures. Add new ones additively; keep files small (KiB to a few MiB).

The suite runs in parallel (``pytest -n 2``, pytest-xdist; .ci/run does) as well as serially, and this
file is where the workers are kept apart — nowhere else:

* each worker process gets its own world (:func:`_worker_world`): data root (so the default ledger and
  models), device-lock directory (the real one, /tmp/workbench-locks, is machine-wide: two workers
  taking it would wait on each other's runs), identity cache, IPython and Jupyter runtime dirs; a test
  that sets its own with ``monkeypatch.setenv`` still wins. ``synth_model`` and the other session
  fixtures are per worker already (each worker has its own basetemp);
* a test marked ``machine_wide`` (it squeezes the whole machine: an mlock balloon of everything
  available) runs while no other test of the run does (:func:`_machine_wide_alone`), whatever ``-n``.
"""
from __future__ import annotations

import fcntl
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator, Sequence

import numpy as np
import pytest

from workbench.formats.index import TensorIndex, TensorInfo


_DREW_NONE = False  # whether this suite, not the user, turned static figures off
_SUITE_SET_BROWSER = "WORKBENCH_TESTS_SET_BROWSER"


def pytest_configure(config: pytest.Config) -> None:
    """Static images (kaleido in a headless Chromium: ~6 s to start, once per notebook, report or export)
    are drawn only in the tests marked ``static_figures``, which test them; every other test's notebooks
    and reports say "static images not drawn". A ``WORKBENCH_BROWSER`` set by the user is left alone."""
    global _DREW_NONE
    from workbench.settings import defaults

    if defaults.BROWSER not in os.environ:
        os.environ[defaults.BROWSER] = "none"
        os.environ[_SUITE_SET_BROWSER] = "1"  # xdist workers inherit the "none": this says it was ours
    _DREW_NONE = os.environ.get(_SUITE_SET_BROWSER) == "1"


WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")  # gw0, gw1 … under pytest-xdist


@pytest.fixture(scope="session", autouse=True)
def _worker_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This worker's own data root, device-lock directory, cache dir and IPython/Jupyter dirs (see the top)."""
    root = tmp_path_factory.mktemp(f"world-{WORKER}")
    patch = pytest.MonkeyPatch()
    for name, sub in (("WORKBENCH_DATA", "data"), ("WORKBENCH_LOCK_DIR", "locks"), ("WORKBENCH_CACHE_DIR", "cache"),
                      ("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "jupyter-runtime")):
        patch.setenv(name, str(root / sub))
    patch.delenv("WORKBENCH_LEDGER", raising=False)  # the default ledger: <data root>/ledger.sqlite
    yield root
    patch.undo()


@pytest.fixture(scope="session")
def _run_locks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(gate, main) lock files shared by every worker of this run (the run's basetemp holds the workers')."""
    base = tmp_path_factory.getbasetemp()
    run_root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return run_root / "machine-wide.gate", run_root / "machine-wide.lock"


@pytest.fixture(autouse=True)
def _machine_wide_alone(request: pytest.FixtureRequest, _run_locks: tuple[Path, Path]):
    """Every test holds the run's lock shared; a ``machine_wide`` one holds it alone. The gate makes it
    fair: a machine-wide test waiting for the lock holds the gate, so no new test starts meanwhile."""
    alone = request.node.get_closest_marker("machine_wide") is not None
    gate = os.open(_run_locks[0], os.O_RDWR | os.O_CREAT, 0o600)
    main = os.open(_run_locks[1], os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(main)  # closing drops both locks
        os.close(gate)


@pytest.fixture(autouse=True)
def _static_figures_where_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.settings import defaults

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


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench_module() -> Iterator[Callable[[str], ModuleType]]:
    """``bench_module("probe_staging")``: a script of benchmarks/ imported as a module, with every room of
    benchmarks/ (bench/, probe/, fuzz/ …) on the path for the test module's life (the scripts import their
    siblings), taken off after."""
    rooms = [str(p) for p in sorted(BENCHMARKS.iterdir()) if p.is_dir() and p.name[0] not in "._"]
    sys.path[:0] = rooms
    try:
        yield importlib.import_module
    finally:
        for room in rooms:
            sys.path.remove(room)


@pytest.fixture()
def warm_file(tmp_path) -> Callable[[int], str]:
    """``warm_file(nbytes)``: the path of a file of ``nbytes`` (a multiple of 256) holding 0..255 repeated,
    for the probes of benchmarks/ that read a file warm."""
    def make(nbytes: int) -> str:
        f = tmp_path / f"warm-{nbytes}.bin"
        f.write_bytes(bytes(range(256)) * (nbytes // 256))
        return str(f)
    return make
