"""Bad sets (issue 17 §4), built here from good ones: each gets one line naming the file (and the
tensor, where there is one), exit code 2 from ``workbench inspect`` and ``workbench run`` (refused by
the runner's preflight before any attempt is opened: the ledger gets nothing), and a member outside
the model's directory is refused before anything is opened — proven with a FIFO as the target, which
any open would block on.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import FormatError
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic

ST_INDEX = "model.safetensors.index.json"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """One good set of each kind, copied by each test before it is broken."""
    root = tmp_path_factory.mktemp("good")
    for fmt in ("safetensors", "gguf"):
        write_synthetic(root / fmt, format=fmt, layout="dense", size=256 << 10, shards=3, seed=5)
    return root


@pytest.fixture
def st(good, tmp_path) -> Path:
    return Path(shutil.copytree(good / "safetensors", tmp_path / "model"))


@pytest.fixture
def gg(good, tmp_path) -> Path:
    return Path(shutil.copytree(good / "gguf", tmp_path / "model"))


def shard(model: Path, i: int, ext: str = "safetensors") -> Path:
    return model / f"model-{i:05d}-of-00003.{ext}"


def edit_index(model: Path, change) -> dict:
    doc = json.loads((model / ST_INDEX).read_text())
    change(doc)
    (model / ST_INDEX).write_text(json.dumps(doc))
    return doc


def a_tensor_of(model: Path, i: int) -> str:
    doc = json.loads((model / ST_INDEX).read_text())
    return next(t for t, f in doc["weight_map"].items() if f == shard(model, i).name)


def refused(path: Path, *parts: str) -> str:
    """open_index, `workbench inspect` and `workbench run` all refuse ``path`` with the same one line."""
    with pytest.raises(FormatError) as err:
        open_index(path)
    line = str(err.value)
    assert "\n" not in line and all(p in line for p in parts), line
    ledger = path.parent.parent / "ledger.sqlite" if path.is_file() else path.parent / "ledger.sqlite"
    for args in (["inspect", str(path)],
                 ["run", str(path), "--strategy", "pread", "--runs", "1", "--cache", "asis", "--ledger", str(ledger)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and res.stderr == f"workbench: error: {line}\n", (args, res.output)
    assert not ledger.exists()  # refused before the ledger was opened: no attempt, nothing to repair
    return line


def outside_fifo(model: Path) -> Path:
    fifo = model.parent / "outside" / "weights.safetensors"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    return fifo


def refused_at_once(path: Path, fifo: Path, *parts: str) -> str:
    """Refused within seconds although the target is a FIFO (opening it to read would block), then the
    same through the CLI."""
    out: dict = {}

    def attempt():
        try:
            open_index(path)
        except FormatError as exc:
            out["error"] = str(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # it opened the FIFO: give it a writer so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"{path}: resolution opened {fifo}, outside the model's directory")
    assert out, "no error at all"
    return refused(path, *parts)


# --- a member outside the model's directory ------------------------------------------------------


@pytest.mark.parametrize("how", ["dotdot", "absolute", "link", "dirlink"])
def test_an_index_naming_a_file_outside_is_refused_before_anything_is_opened(st, how):
    fifo = outside_fifo(st)
    victim = a_tensor_of(st, 2)
    name = {"dotdot": "../outside/weights.safetensors", "absolute": str(fifo), "link": "evil.safetensors",
            "dirlink": "sub/weights.safetensors"}[how]
    if how == "link":
        (st / "evil.safetensors").symlink_to(fifo)
    if how == "dirlink":  # a folder of the model that is a link out of it
        (st / "sub").symlink_to(fifo.parent, target_is_directory=True)
    edit_index(st, lambda d: d["weight_map"].__setitem__(victim, name))
    line = refused_at_once(st / ST_INDEX, fifo, ST_INDEX, f"weight_map['{victim}']")
    assert "leaves the model's directory" in line or "not a file name inside" in line
    refused(st, ST_INDEX, victim)  # the directory resolves to the same index


@pytest.mark.parametrize("named", ["dir", "shard"])
def test_a_sibling_shard_that_links_outside_is_refused_before_it_is_opened(st, named):
    os.unlink(st / ST_INDEX)  # a set found by its shards' names
    fifo = outside_fifo(st)
    os.unlink(shard(st, 2))
    shard(st, 2).symlink_to(fifo)
    path = st if named == "dir" else shard(st, 1)
    refused_at_once(path, fifo, shard(st, 2).name, "leaves the model's directory")


def test_the_directorys_index_that_links_outside_is_refused(st, tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    shutil.move(st / ST_INDEX, elsewhere)
    (st / ST_INDEX).symlink_to(elsewhere)
    refused(st, ST_INDEX, "leaves the model's directory")
    refused(shard(st, 1), ST_INDEX, "leaves the model's directory")  # found as the shard's sibling


def test_a_fifo_in_the_index_s_place_or_a_shard_s_is_refused_without_blocking(st):
    victim = a_tensor_of(st, 3)
    os.unlink(shard(st, 3))
    os.mkfifo(shard(st, 3))
    refused_at_once(st / ST_INDEX, shard(st, 3), shard(st, 3).name, "not a regular file", victim)


# --- the set disagrees with itself ----------------------------------------------------------------


def test_a_missing_shard_is_named_with_a_tensor_the_index_puts_in_it(st):
    victim = a_tensor_of(st, 2)
    os.unlink(shard(st, 2))
    refused(st / ST_INDEX, shard(st, 2).name, "missing shard", f"tensor '{victim}'")
    refused(shard(st, 1), shard(st, 2).name, "missing shard")


def test_a_missing_shard_of_a_set_without_index(st):
    os.unlink(st / ST_INDEX)
    os.unlink(shard(st, 3))
    refused(shard(st, 1), shard(st, 3).name, "missing shard 3 of 3")


def test_a_tensor_listed_but_absent_from_its_shard(st):
    edit_index(st, lambda d: d["weight_map"].__setitem__("ghost.weight", shard(st, 2).name))
    refused(st / ST_INDEX, shard(st, 2).name, "tensor 'ghost.weight'", "absent from this shard")


def test_a_tensor_in_two_shards(st):
    from safetensors.numpy import load_file, save_file

    victim = a_tensor_of(st, 1)
    third = load_file(shard(st, 3))
    third[victim] = load_file(shard(st, 1))[victim]
    save_file(third, shard(st, 3))
    refused(st / ST_INDEX, shard(st, 3).name, f"tensor '{victim}'", f"also in {shard(st, 1).name}")


def test_a_shard_tensor_missing_from_the_index(st):
    victim = a_tensor_of(st, 3)
    edit_index(st, lambda d: d["weight_map"].pop(victim))
    refused(st / ST_INDEX, shard(st, 3).name, f"tensor '{victim}'", f"missing from {ST_INDEX}")


def test_a_tensor_the_index_puts_in_another_shard(st):
    victim = a_tensor_of(st, 3)
    edit_index(st, lambda d: d["weight_map"].__setitem__(victim, shard(st, 1).name))
    refused(st / ST_INDEX, shard(st, 3).name, f"tensor '{victim}'", f"puts it in {shard(st, 1).name}")


@pytest.mark.parametrize("total", [1, -1, 1.5, "many", True])
def test_total_size_that_disagrees_or_is_no_size(st, total):
    doc = json.loads((st / ST_INDEX).read_text())
    wrong = doc["metadata"]["total_size"] + 1 if total == 1 else total
    edit_index(st, lambda d: d["metadata"].__setitem__("total_size", wrong))
    refused(st / ST_INDEX, ST_INDEX, "metadata.total_size")


def test_total_size_nan_is_one_line_not_a_crash(st):
    text = (st / ST_INDEX).read_text()
    doc = json.loads(text)
    (st / ST_INDEX).write_text(text.replace(str(doc["metadata"]["total_size"]), "NaN"))
    refused(st / ST_INDEX, "metadata.total_size", "nan")


def test_a_tensor_named_twice_in_the_weight_map(st):
    victim = a_tensor_of(st, 1)
    text = (st / ST_INDEX).read_text()
    (st / ST_INDEX).write_text(text.replace('"weight_map": {', f'"weight_map": {{"{victim}": "x", ', 1))
    refused(st / ST_INDEX, ST_INDEX, f"key '{victim}' appears twice")


def test_shards_of_different_formats(st, good):
    gguf_split = next((good / "gguf").glob("*-00003-of-00003.gguf"))
    shutil.copyfile(gguf_split, shard(st, 3))  # a GGUF under a safetensors shard's name
    refused(st / ST_INDEX, shard(st, 3).name, "is gguf", "share one format")


def test_an_index_over_one_shard_is_still_checked(st):
    first = shard(st, 1).name
    edit_index(st, lambda d: d.__setitem__("weight_map", {t: first for t in d["weight_map"]}))
    refused(st / ST_INDEX, first, "absent from this shard")


# --- gguf-split sets --------------------------------------------------------------------------------


def patch_split_key(path: Path, key: str, value: int | None) -> None:
    """Overwrite a split.* key's value in place (None: rename the key so it is missing)."""
    from gguf import GGUFValueType

    raw = bytearray(path.read_bytes())
    at = raw.index(key.encode()) + len(key)
    if value is None:
        raw[at - 1:at] = b"X"
    else:
        vtype = GGUFValueType(struct.unpack_from("<I", raw, at)[0])
        code = {GGUFValueType.UINT16: "<H", GGUFValueType.INT32: "<i", GGUFValueType.UINT32: "<I",
                GGUFValueType.INT16: "<h", GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q"}[vtype]
        struct.pack_into(code, raw, at + 4, value)
    path.write_bytes(bytes(raw))


def test_a_gguf_split_set_loads_as_made(gg):
    assert len(open_index(shard(gg, 2, "gguf")).files) == 3  # the control: the patches below break it


def test_a_gguf_split_missing(gg):
    os.unlink(shard(gg, 2, "gguf"))
    refused(shard(gg, 1, "gguf"), shard(gg, 2, "gguf").name, "missing shard 2 of 3")
    refused(gg, shard(gg, 2, "gguf").name, "missing shard 2 of 3")


@pytest.mark.parametrize("key, split, value, says", [
    ("split.no", 3, 1, "split.no: 1 again (also model-00002-of-00003.gguf)"),
    ("split.no", 2, 2, "split.no: is 2, but the file is split 2 of 3 by name"),
    ("split.no", 2, 7, "split.no: is 7, expected 0..2"),
    ("split.no", 2, None, "split.no: missing"),
    ("split.count", 2, 2, "split.count: is 2, the set has 3 files"),
    ("split.count", 1, None, "split.count: missing"),
    ("split.tensors.count", 3, 5, "split.tensors.count: says 5 tensors"),
])
def test_split_keys_that_disagree_with_the_files(gg, key, split, value, says):
    patch_split_key(shard(gg, split, "gguf"), key, value)
    for named in (gg, shard(gg, 1, "gguf"), shard(gg, 3, "gguf")):
        refused(named, shard(gg, split, "gguf").name, says)


def test_a_lone_gguf_whose_keys_say_split_but_whose_name_does_not(gg, tmp_path):
    lone = tmp_path / "renamed.gguf"
    shutil.copyfile(shard(gg, 1, "gguf"), lone)
    refused(lone, "renamed.gguf", "split.count", "cannot find the other splits")


# --- a set that breaks after preflight: the run fails, the attempt is recorded as failed ----------


def test_a_set_broken_after_preflight_is_a_failed_attempt_and_the_ledger_stays_sound(st, tmp_path, monkeypatch):
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure
    from workbench.measure.run import runner

    real_preflight = runner.preflight

    def preflight_then_break(configs):
        real_preflight(configs)
        os.unlink(shard(st, 2))  # a download still running, a clean-up racing the sweep

    monkeypatch.setattr(runner, "preflight", preflight_then_break)
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        results = measure([RunConfig(str(st / ST_INDEX), "pread")], runs=2, cache="asis", ledger=ledger,
                          lock_dir=tmp_path / "locks")
        assert [r.verdict for r in results] == ["failed"]
        errors = [run.error for run in results[0].runs]
        assert all(shard(st, 2).name in e and "missing shard" in e and "\n" not in e for e in errors), errors
        attempts = ledger.attempts()
        assert list(attempts["verdict"]) == ["failed"] and len(ledger.run_records(results[0].attempt_id)) == 2
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM attempts WHERE verdict = 'running'").fetchone()[0] == 0
