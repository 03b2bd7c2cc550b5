"""``workbench run | compare | external | ceilings`` on a model that is a set of files."""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.io.envinfo import eviction_support
from workbench.io.identity import model_identity
from workbench.ledger import Ledger


@pytest.fixture
def env(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path


def _invoke(*args: str):
    out = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return out


def test_compare_on_a_directory_shows_the_set(env: Path, sharded_model) -> None:
    index = sharded_model("safetensors", "dense", shards=3)
    model = os.path.dirname(index.files[0].path)
    out = _invoke("compare", model, "--strategy", "pread", "--strategy", "mmap", "--runs", "1", "--campaign", "d")
    assert f"model: {model} (3 files, {index.size / 1e9:.2f} GB)" in out.stdout
    assert f"pread · {os.path.basename(model)}" in out.stdout  # labelled by the model, not a shard
    attempts = Ledger(env / "ledger.sqlite").attempts("d")
    assert set(attempts["file_hash"]) == {model_identity(index).hash}


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_a_directory_an_index_and_a_shard_are_one_model(env: Path, sharded_model, fmt: str) -> None:
    index = sharded_model(fmt, "dense", shards=3)
    named = [os.path.dirname(index.files[0].path), index.files[2].path, index.path]
    for i, path in enumerate(named):
        out = _invoke("run", path, "--strategy", "pread", "--runs", "1", "--cache", "warm", "--campaign", fmt,
                      "--json")
        data = json.loads(out.stdout)
        assert data["verdict"] == "baseline" and data["runs"][0]["verified"], data
    attempts = Ledger(env / "ledger.sqlite").attempts(fmt)
    assert len(attempts) == 3 and set(attempts["file_hash"]) == {model_identity(index).hash}
    assert set(attempts["file_path"]) == {index.path}


def test_external_sets_the_cache_state_of_every_file(env: Path, sharded_model) -> None:
    index = sharded_model("safetensors", "dense", shards=3)
    model = os.path.dirname(index.files[0].path)
    # an engine that reads every file of the set: the run carries the set's bytes only with that evidence
    read_all = ("import os, sys; d = sys.argv[1]; [open(os.path.join(d, f), 'rb').read() for f in os.listdir(d)]; "
                "print('loaded')")
    cmd = shlex.join([sys.executable, "-c", read_all, model])
    out = _invoke("external", "--cmd", cmd, "--marker", "loaded", "--file", model, "--runs", "2", "--cache",
                  "cold", "--campaign", "ext")
    assert f"model: {model} (3 files" in out.stdout
    ledger = Ledger(env / "ledger.sqlite")
    (attempt,) = ledger.attempts("ext").to_dict("records")
    assert attempt["file_hash"] == model_identity(index).hash
    runs = ledger.runs(attempt["id"])
    want = {os.path.basename(f.path) for f in index.files} | {os.path.basename(index.index_file)}
    for run in runs.to_dict("records"):
        assert run["cache_reached"] and set(run["resident_files"]) == want
        assert all(f <= 0.02 for f in run["resident_files"].values())
        assert run["bytes"] == index.nbytes  # the set's tensor bytes, not one shard's


def test_external_refuses_a_directory_without_a_model_in_one_line(env: Path) -> None:
    (env / "empty").mkdir()
    out = CliRunner().invoke(main, ["external", "--cmd", "true", "--marker", "x", "--file", str(env / "empty")])
    assert out.exit_code == 2 and "no model in it" in out.output and "Traceback" not in out.output


def test_ceilings_file_takes_a_set(env: Path, sharded_model) -> None:
    index = sharded_model("gguf", "dense", shards=3)
    out = _invoke("ceilings", "--dir", str(env), "--size", "4MiB", "--threads", "1", "--file",
                  os.path.dirname(index.files[0].path), "--json")
    walls = {c["name"]: c for c in json.loads(out.stdout)["ceilings"]}
    assert walls["page_cache_read_file_1t"]["detail"]["files"] == 3
    assert walls["page_cache_read_file_1t"]["detail"]["bytes"] == index.size


def test_env_on_a_model_directory_shows_the_set_and_where_its_files_live(env: Path, sharded_model) -> None:
    index = sharded_model("safetensors", "dense", shards=3)
    model = os.path.dirname(index.files[0].path)
    out = _invoke("env", "--dir", model, "--json")
    facts = json.loads(out.stdout)
    assert facts["dir"] == os.path.realpath(model) and facts["model"]["files"] == 3
    assert facts["model"]["bytes"] == index.size and facts["model"]["file_systems"]
    assert f"{model} (3 files" in _invoke("env", "--dir", model).stdout
    assert "model" not in json.loads(_invoke("env", "--dir", str(env), "--json").stdout)  # not a model: no row
