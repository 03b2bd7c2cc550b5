"""A baseline is the same model, or the line says it is not (issue 33 §2).

A ``--baseline`` of another model identity, cache state or device is refused in one line naming what
differs (exit 2), before anything is recorded; with ``--baseline-across`` the ratio is given, and the
table line, ``--json``, ``ledger list``, ``ledger verdict`` and both exports say ACROSS and what differs.
The models are written by huggingface_hub (a split set) and the safetensors library (one file).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from foreign_writers import write_hub_checkpoint
from workbench.cli import main
from workbench.io.envinfo import eviction_support
from workbench.ledger import Ledger
from workbench.records.baseline_match import baseline_differences, describe_across


@pytest.fixture
def world(tmp_path, monkeypatch) -> Path:
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    for var, name in (("WORKBENCH_CACHE_DIR", "cache"), ("WORKBENCH_LEDGER", "ledger.sqlite"),
                      ("WORKBENCH_LOCK_DIR", "locks")):
        monkeypatch.setenv(var, str(tmp_path / name))
    return tmp_path


@pytest.fixture
def models(world) -> tuple[Path, Path]:
    """(a split set written by huggingface_hub, one file written by safetensors)."""
    pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    from safetensors.numpy import save_file

    split = world / "tiny-split"
    write_hub_checkpoint(split, seed=3)
    single = world / "tiny-single"
    single.mkdir()
    save_file({f"w{i}": np.arange(4096 + i, dtype=np.float32) for i in range(6)}, str(single / "model.safetensors"))
    return split, single


def cli(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(main, list(args))
    return out.exit_code, out.output


def attempt_ids(world: Path) -> list[str]:
    with Ledger(world / "ledger.sqlite") as led:
        return list(led.attempts()["id"])


def measured(model: Path, cache: str, *more: str) -> str:
    code, out = cli("run", str(model), "--strategy", "pread", "--runs", "2", "--cache", cache, *more)
    assert code == 0, out
    return out


def test_a_baseline_of_another_model_or_state_is_refused_before_anything_is_recorded(world, models):
    split, single = models
    measured(single, "warm")
    (base,) = attempt_ids(world)
    # the case: another model, and warm where this is cold
    code, out = cli("run", str(split), "--strategy", "pread", "--runs", "2", "--cache", "cold", "--baseline", base[:8])
    assert code == 2, out
    (line,) = out.strip().splitlines()  # one line, no traceback
    assert f"baseline {base[:8]} is another model (tiny-single, " in line and "and warm, not cold" in line
    assert "--baseline-across" in line
    # compare between a split set and a single file, the same state: another model all the same
    code, out = cli("compare", str(split), "--strategy", "pread", "--runs", "2", "--cache", "warm",
                    "--baseline", base)
    assert code == 2 and "is another model" in out and "warm, not" not in out, out
    # the same model in another state, asked for two states: refused before the first state is measured
    code, out = cli("compare", str(single), "--strategy", "mmap", "--runs", "2", "--cache", "warm",
                    "--cache", "cold", "--baseline", base)
    assert code == 2 and f"baseline {base[:8]} is warm, not cold" in out, out
    assert attempt_ids(world) == [base]  # nothing recorded by the refusals


def test_the_same_model_elsewhere_in_the_same_state_is_a_baseline(world, models):
    split, _ = models
    measured(split, "warm")
    (base,) = attempt_ids(world)
    copy = world / "copy-of-split"
    copy.mkdir()
    for f in split.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    out = measured(copy, "warm", "--baseline", base)
    assert "ACROSS" not in out


def test_across_when_asked_is_said_everywhere_the_ratio_is(world, models):
    split, single = models
    measured(single, "warm")
    (base,) = attempt_ids(world)
    code, out = cli("run", str(split), "--strategy", "pread", "--runs", "2", "--cache", "cold",
                    "--baseline", base, "--baseline-across", "--json")
    assert code == 0, out
    result = json.loads(out[out.index("{"):])
    what = f"baseline {base[:8]} is another model (tiny-single, "
    assert result["baseline_across"].startswith(what) and "warm, not cold" in result["baseline_across"]
    assert "ACROSS: " + what in result["effect"] and "ACROSS" in result["notes"]
    later = result["attempt_id"]
    code, listing = cli("ledger", "list")
    row = next(line for line in listing.splitlines() if line.startswith(later[:8]))
    assert "ACROSS: " + what in row
    code, md = cli("ledger", "export", "--markdown", "-")
    row = next(line for line in md.splitlines() if later[:8] in line)
    assert "ACROSS: baseline" in row and "another model (tiny-single, " in row
    code, csv = cli("ledger", "export", "--csv", "-")
    assert code == 0 and csv.count("ACROSS: baseline") >= 2  # the effect cell and the baseline_across column
    code, out = cli("ledger", "verdict", later[:8], "kept", "--note", "checked by hand")
    assert code == 0 and "ACROSS" in out


def test_differences_are_named_and_a_fact_one_side_lacks_is_none():
    ours = {"file_hash": "set:xxh3_128:aa", "file_size": 3 << 20, "file_path": "/m/tiny-llama-f16",
            "cache": "cold", "device": "cuda"}
    base = {**ours, "file_hash": "xxh3_128:bbbbbbbbbbbb", "file_path": "/n/tiny-llama-f16.gguf",
            "cache": "warm", "device": "cuda:1"}
    found = baseline_differences(ours, base)
    # one display name for two models: the hash tells them apart
    assert found == ["another model (tiny-llama-f16 #bbbbbbbb, 3.00 MiB; this is tiny-llama-f16 #aa, 3.00 MiB)",
                     "warm, not cold", "on cuda:1, not cuda:0"]
    assert describe_across("0123456789", found[1:]) == "baseline 01234567 is warm, not cold and on cuda:1, not cuda:0"
    assert baseline_differences(ours, {**ours, "device": "cuda:0"}) == []  # cuda is cuda:0
    assert baseline_differences(ours, {"cache": "cold"}) == []
    unreached = {**ours, "cache": "asis(unreachable: cold, 2/5 runs; tmpfs)"}  # asked for cold: its label says the rest
    assert baseline_differences(ours, unreached) == []
    assert baseline_differences({**ours, "cache": "warm"}, unreached) == ["cold, not warm"]
    # a device of one name on another machine (a merged ledger) is another device
    assert baseline_differences({**ours, "host": "h200-a"}, {**ours, "host": "vm-b"}) == \
        ["measured on vm-b, not h200-a"]
    no_hash = {k: v for k, v in ours.items() if k != "file_hash"}
    assert baseline_differences(no_hash, {**no_hash, "file_size": 1 << 20})[0].startswith("another model")
