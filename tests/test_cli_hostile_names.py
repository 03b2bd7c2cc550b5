"""Issue 35 §3: names from files reach the terminal neutralized — one rule (``untrusted.for_terminal``,
applied to each logical line a command prints) for every command that prints a name: a file or
directory name and tensor names (written by the safetensors library, a foreign writer) holding an OSC 52
clipboard write, colour codes and a newline that would forge a line of its own.

Before (ab896bb): ``inspect`` printed them raw (the OSC 52 went through even a pipe, a forged
``workbench: ok all good`` line), as did ``synth``'s "wrote" line and ``session``'s model line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main

OSC52 = "\x1b]52;c;aGFjaw==\x07"
FORGE = "\nworkbench: ok all good"
HOSTILE_FILE = f"m{OSC52}\x1b[31mred\x9b2J{FORGE}"  # a legal file name: no '/', no NUL
HOSTILE_TENSOR = f"blk.0{OSC52}\x1b[1;31m.weight\u202e{FORGE}"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def clean(output: str, what: str) -> None:
    """No raw control or bidi character, and no line that a name forged."""
    assert not any(c in output for c in RAW), (what, output[:2000])
    forged = [line for line in output.splitlines() if line.lstrip().startswith("workbench: ok")]
    assert not forged, (what, forged)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A safetensors file with a hostile name, written by the safetensors library with hostile tensor names."""
    from safetensors.numpy import save_file

    directory = tmp_path_factory.mktemp("hostile") / f"dir{OSC52}{FORGE}"
    directory.mkdir()
    path = directory / f"{HOSTILE_FILE}.safetensors"
    save_file({HOSTILE_TENSOR: np.arange(64, dtype=np.float32), "plain.weight": np.ones(32, dtype=np.float16)},
              str(path))
    return path


@pytest.fixture()
def data(tmp_path: Path):
    with defaults.set_data_root(tmp_path / "data"), defaults.set_ledger_path(tmp_path / "ledger.sqlite"):
        yield tmp_path


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result.output


@pytest.mark.parametrize("flags", [[], ["--all"], ["--json"], ["--no-hash", "--top", "1"]])
def test_inspect_neutralizes_file_and_tensor_names(model, data, flags):
    out = invoke("inspect", *flags, model)
    clean(out, f"inspect {flags}")
    if "--json" in flags:
        names = {t["name"] for t in json.loads(out)["tensors"]}
        assert HOSTILE_TENSOR in names  # JSON carries the name exactly, escaped by JSON itself
    elif "--top" not in flags:
        assert "\\x1b]52" in out and "\\nworkbench: ok all good" in out  # shown, escaped, on its own line


def test_inspect_of_the_directory_and_an_error_naming_the_file(model, data):
    clean(invoke("inspect", "--no-hash", model.parent), "inspect directory")
    bad = model.parent / f"bad{OSC52}{FORGE}.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    clean(invoke("inspect", bad), "inspect of a bad file")
    bad.unlink()
    clean(invoke("env", model.parent), "env of the model's directory")


def test_synth_run_and_the_ledger_neutralize_the_model_name(model, data):
    out_path = data / f"{HOSTILE_FILE}.gguf"
    clean(invoke("synth", out_path, "--format", "gguf", "--size", "1MiB"), "synth")
    clean(invoke("run", model, "--strategy", "pread", "--runs", "1", "--cache", "warm", "--label",
                 f"lab{OSC52}{FORGE}"), "run")
    clean(invoke("compare", model, "--strategy", "pread", "--strategy", "mmap", "--runs", "1", "--cache", "warm"),
          "compare")
    clean(invoke("ledger", "list"), "ledger list")
    clean(invoke("ledger", "show", "latest"), "ledger show")
    clean(invoke("ledger", "export", "--markdown", "-"), "ledger export --markdown -")
    clean(invoke("ledger", "export", "--csv", data / f"a{OSC52}{FORGE}.csv"), "ledger export --csv")
    hostile_ledger = data / f"l{OSC52}{FORGE}.sqlite"
    clean(invoke("ledger", "--ledger", hostile_ledger, "list"), "ledger list of a new hostile path")
    clean(invoke("run", model, "--strategy", "pread", "--runs", "1", "--cache", "warm", "--ledger", hostile_ledger),
          "run into a hostile ledger path")
    clean(invoke("ledger", "upgrade", "--ledger", hostile_ledger), "ledger upgrade")


def test_a_session_neutralizes_the_model_name(data):
    from workbench.formats.synth import write_synthetic

    directory = data / f"moe{OSC52}{FORGE}"
    directory.mkdir()
    path = write_synthetic(directory / f"{HOSTILE_FILE}.gguf", format="gguf", layout="moe", size=2 << 20).path
    clean(invoke("session", path, "--turns", "2", "--tokens", "2", "--label", f"s{OSC52}{FORGE}"), "session")
    clean(invoke("session", path, "--turns", "1", "--tokens", "1", "--rounds", "1", "--ab", "lanes=1",
                 "--ab", "lanes=2"), "session --ab")


def test_a_sweep_neutralizes_its_values(model, data):
    sweep = data / "s.yaml"
    sweep.write_text(json.dumps({"notebook": "01_load_sweep", "campaign": "c", "grid": {"file": [str(model)]}}))
    clean(invoke("sweep", sweep, "--dry-run"), "sweep --dry-run")
