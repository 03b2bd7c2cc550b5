"""The same checkpoint has the same identity wherever it lies (issue 23 §1): a Hugging Face cache snapshot
(files linking into ``blobs/`` named by hash) and a plain copy of it hash the same — over the members'
logical names and contents, not the blobs' names — and the ledger keeps each file's logical name and
the path its bytes were read from, so the snapshot can be the baseline of the copy, and the per-file
table of notebook 01 finds the snapshot's sizes.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from foreign_writers import hub_cache_snapshot, write_hub_checkpoint
from workbench.cli import main
from workbench.io.envinfo import eviction_support
from workbench.io.identity import model_identity
from workbench.ledger import Ledger
from workbench.ledger.figures.files import file_residency_table
from workbench.output.untrusted import for_markdown

REV = "3c1e0a4f9b6d2e8a7c5b4a3928171605f4e3d2c1"


@pytest.fixture(autouse=True)
def private(tmp_path, monkeypatch):
    for var, name in (("WORKBENCH_CACHE_DIR", "cache"), ("WORKBENCH_LEDGER", "ledger.sqlite"),
                      ("WORKBENCH_LOCK_DIR", "locks")):
        monkeypatch.setenv(var, str(tmp_path / name))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A sharded checkpoint written by huggingface_hub (read only by the tests)."""
    pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    plain = tmp_path_factory.mktemp("plain") / "tiny"
    write_hub_checkpoint(plain, seed=4)
    return plain


def snapshot_of(tmp_path: Path, plain: Path, sub: str = "") -> Path:
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    hub = tmp_path / "hub"
    snapshot = hub_cache_snapshot(hub, "org/tiny", plain, REV, sub)
    if not sub:  # huggingface_hub reads our layout as its own
        (repo,) = scan_cache_dir(hub).repos
        assert repo.repo_id == "org/tiny" and {r.commit_hash for r in repo.revisions} == {REV}
        assert try_to_load_from_cache("org/tiny", "model.safetensors.index.json", cache_dir=hub) == \
            str(snapshot / "model.safetensors.index.json")
    return snapshot


@pytest.mark.parametrize("sub", ["", "transformer"])
def test_a_snapshot_and_a_plain_copy_have_one_identity(checkpoint, tmp_path, sub):
    snapshot = snapshot_of(tmp_path, checkpoint, sub)
    assert all(os.path.islink(p) for p in snapshot.iterdir())
    plain, cached = model_identity(checkpoint), model_identity(snapshot)
    assert cached.hash == plain.hash and cached.size == plain.size
    assert [os.path.basename(m.path) for m in cached.files] == [os.path.basename(m.path) for m in plain.files]
    for member in cached.files:  # the name as the snapshot names it; the bytes read from its blob
        assert os.path.dirname(member.path) == str(snapshot)
        assert os.path.dirname(member.read_path) == str(tmp_path / "hub" / "models--org--tiny" / "blobs")
    moved = tmp_path / "elsewhere" / "renamed"  # another directory name, the same files: the same model
    shutil.copytree(checkpoint, moved)
    assert model_identity(moved).hash == plain.hash


def test_a_one_file_snapshot_is_named_by_its_entry_and_read_from_its_blob(tmp_path):
    from safetensors.numpy import save_file
    import numpy as np

    plain = tmp_path / "one"
    plain.mkdir()
    save_file({"w": np.arange(4096, dtype=np.float32)}, str(plain / "model.safetensors"))
    snapshot = hub_cache_snapshot(tmp_path / "hub", "org/one", plain, REV)
    ident = model_identity(snapshot)
    assert ident.hash == model_identity(plain).hash
    assert ident.path == str(snapshot / "model.safetensors") and "/blobs/" in ident.read_path


def test_the_ledger_keeps_names_and_paths_read_and_the_snapshot_is_the_copys_baseline(checkpoint, tmp_path):
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    snapshot = snapshot_of(tmp_path, checkpoint)

    def run(model: Path, *more: str) -> None:
        out = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "cold",
                                        "--campaign", "hub", *more])
        assert out.exit_code == 0, out.output

    run(snapshot)
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        base = ledger.attempts("hub").to_dict("records")[0]
    run(checkpoint, "--baseline", base["id"])
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        attempts, runs = ledger.attempts("hub"), ledger.runs(campaign="hub")
    first, second = attempts.to_dict("records")
    assert first["file_hash"] == second["file_hash"]
    assert "differs: file" not in (second["notes"] or ""), second["notes"]  # one model: the baseline holds
    names = sorted(p.name for p in checkpoint.iterdir())
    for attempt, where in ((first, snapshot), (second, checkpoint)):
        members = attempt["environment"]["model_files"]
        assert sorted(m["name"] for m in members) == names
        blobs = str(tmp_path / "hub" / "models--org--tiny" / "blobs")
        reads = {os.path.dirname(m["read"]) for m in members}
        assert reads == ({blobs} if where == snapshot else {str(checkpoint)})
        assert attempt["file_path"] == str(where / "model.safetensors.index.json")  # the path as named
    table = file_residency_table(attempts[attempts["id"] == first["id"]], runs)  # notebook 01's per-file table
    assert table is not None and table["MiB"].notna().all(), table
    assert sorted(table["file"]) == names
    assert_named_by_the_model(tmp_path, "org/tiny@3c1e0a4", "tiny")


def assert_named_by_the_model(tmp_path: Path, *names: str) -> None:
    """``ledger list``, the labels, the CSV and the PR Markdown call each model by its name: not
    ``model.safetensors.index.json``, not a revision hash."""
    import csv

    listed = CliRunner().invoke(main, ["ledger", "list"]).output.splitlines()
    rows = [line.split() for line in listed[1:]]
    assert listed[0].split()[3] == "model" and [r[3] for r in rows] == list(names), listed
    assert all(f"pread · {name}" in line for name, line in zip(names, listed[1:])), listed  # the labels
    out = CliRunner().invoke(main, ["ledger", "export", "--csv", str(tmp_path / "csv"), "--markdown",
                                    str(tmp_path / "table.md")])
    assert out.exit_code == 0, out.output
    with open(tmp_path / "csv" / "attempts.csv", newline="", encoding="utf-8") as fh:
        assert [row["model"] for row in csv.DictReader(fh)] == list(names)
    header = (tmp_path / "table.md").read_text().splitlines()[0]
    shown = [for_markdown(name) for name in names]  # as every Markdown cell is: a mention broken
    assert all(f"{name}, " in header for name in shown) and ".index.json" not in header and REV not in header, header
