"""A Hugging Face cache snapshot whose links point outside its repo's ``blobs/`` (issue 24 §5): the one
kind of link that may leave a model's directory is the hub's ``snapshots/<rev>/<file>`` →
``<repo>/blobs/<sha>``; a snapshot entry that leads anywhere else — another file, another repo's blobs —
is refused in one line however the model is named (the snapshot, its index, a shard, the entry itself),
before the target is opened: the target here is a FIFO, which any open would block on.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from foreign_writers import hub_cache_snapshot
from workbench.cli import main
from workbench.errors import FormatError
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic

REV = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
ST_INDEX = "model.safetensors.index.json"
OUTSIDE = "outside its repo's blobs/"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def snapshot(tmp_path) -> Path:
    """A 3-shard set with its index, in the hub cache's layout (every entry a link to its blob)."""
    pytest.importorskip("huggingface_hub")
    write_synthetic(tmp_path / "plain", format="safetensors", layout="dense", size=256 << 10, shards=3, seed=2)
    return hub_cache_snapshot(tmp_path / "hub", "org/tiny", tmp_path / "plain", REV)


def shard(snapshot: Path, i: int) -> Path:
    return snapshot / f"model-{i:05d}-of-00003.safetensors"


def retarget(entry: Path, target: Path) -> None:
    os.unlink(entry)
    entry.symlink_to(os.path.relpath(target, entry.parent))


def fifo_outside(tmp_path: Path) -> Path:
    fifo = tmp_path / "elsewhere" / "weights.safetensors"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    return fifo


def refused_unopened(path: Path, *parts: str) -> str:
    """``open_index(path)`` refuses in one line (``parts`` in it) without blocking on a FIFO, and
    ``workbench inspect`` says the same line with exit status 2."""
    out: list[BaseException] = []

    def attempt() -> None:
        try:
            open_index(path)
        except BaseException as exc:  # noqa: BLE001 — handed to the test thread
            out.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), f"{path}: resolution opened a file outside the repo's blobs/"
    assert out and isinstance(out[0], FormatError), out
    line = str(out[0])
    assert "\n" not in line and all(p in line for p in parts), line
    cli = CliRunner().invoke(main, ["inspect", str(path)])
    assert cli.exit_code == 2 and cli.output.count("\n") == 1 and "Traceback" not in cli.output, cli.output
    return line


def test_the_snapshot_as_laid_out_loads(snapshot):
    assert len(open_index(snapshot).files) == 3  # the control: each case below breaks only its links


@pytest.mark.parametrize("named", ["snapshot", "index", "other shard", "the entry"])
def test_a_shard_linking_outside_the_blobs_is_refused_unopened(snapshot, tmp_path, named):
    retarget(shard(snapshot, 2), fifo_outside(tmp_path))
    path = {"snapshot": snapshot, "index": snapshot / ST_INDEX, "other shard": shard(snapshot, 1),
            "the entry": shard(snapshot, 2)}[named]
    refused_unopened(path, shard(snapshot, 2).name, OUTSIDE)


@pytest.mark.parametrize("named", ["snapshot", "index", "a shard"])
def test_an_index_linking_outside_the_blobs_is_refused(snapshot, tmp_path, named):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes((snapshot / ST_INDEX).read_bytes())  # the same index, outside the cache
    retarget(snapshot / ST_INDEX, elsewhere)
    path = {"snapshot": snapshot, "index": snapshot / ST_INDEX, "a shard": shard(snapshot, 3)}[named]
    refused_unopened(path, ST_INDEX, OUTSIDE)


def test_a_link_into_another_repos_blobs_is_refused(snapshot, tmp_path):
    other = hub_cache_snapshot(tmp_path / "hub", "org/other", tmp_path / "plain", REV)
    their_blob = Path(os.path.realpath(shard(other, 2)))
    assert "models--org--other" in str(their_blob)
    retarget(shard(snapshot, 2), their_blob)  # the same bytes, but another repo's
    for path in (snapshot, shard(snapshot, 2)):
        refused_unopened(path, shard(snapshot, 2).name, OUTSIDE)


def test_a_one_file_snapshot_linking_outside_is_refused_however_named(tmp_path):
    from safetensors.numpy import save_file

    pytest.importorskip("huggingface_hub")
    (tmp_path / "one").mkdir()
    save_file({"w": np.ones(1024, dtype=np.float32)}, str(tmp_path / "one" / "model.safetensors"))
    snapshot = hub_cache_snapshot(tmp_path / "hub", "org/one", tmp_path / "one", REV)
    assert len(open_index(snapshot).files) == 1
    retarget(snapshot / "model.safetensors", fifo_outside(tmp_path))
    for path in (snapshot, snapshot / "model.safetensors"):
        refused_unopened(path, "model.safetensors", OUTSIDE)
