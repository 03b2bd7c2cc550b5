"""Issue 35 §5: a reader of a user's file answers one line, never a traceback — JSON nested 100,000 deep
(an unrecorded dump, a sweep's notebook, a planted output notebook, a header the writers' ownership
check reads) — and a legal file name stays writable: a 248-byte output name's temporary name fits."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from click.testing import CliRunner
from one_line import one_error_line

from workbench.settings import defaults
from workbench.cli import main

DEEP = "[" * 100_000 + "]" * 100_000


def test_an_unrecorded_dump_nested_100000_deep_is_one_line_and_nothing_written(tmp_path):
    dump, ledger = tmp_path / "dump.json", tmp_path / "l.sqlite"
    for text in (DEEP, '{"ledger": "x", "attempts": ' + DEEP + "}"):
        dump.write_text(text)
        result = CliRunner().invoke(main, ["ledger", "import-unrecorded", str(dump), "--ledger", str(ledger)])
        one_error_line(result, str(dump), "nested too deeply")
    assert not ledger.exists()


def test_an_unrecorded_dump_that_is_no_text_no_file_or_too_big_is_one_line_and_never_waited_on(tmp_path):
    import os

    ledger = tmp_path / "l.sqlite"
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    os.mkfifo(tmp_path / "fifo.json")
    with open(tmp_path / "big.json", "wb") as f:
        f.truncate(300 * 2**20)  # sparse: 300 MiB of nothing
    for name, needle in (("bytes.json", "not UTF-8 text"), ("fifo.json", "a FIFO"), ("big.json", "larger than the")):
        result = CliRunner().invoke(main, ["ledger", "import-unrecorded", str(tmp_path / name), "--ledger", str(ledger)])
        one_error_line(result, name, needle)
    assert not ledger.exists()


def test_a_sweeps_notebook_nested_100000_deep_is_one_line(tmp_path):
    notebook, sweep = tmp_path / "deep.ipynb", tmp_path / "s.yaml"
    notebook.write_text('{"metadata": ' + DEEP + "}")
    sweep.write_text(f"notebook: {notebook}\ncampaign: c\n")
    with defaults.set_data_root(tmp_path):
        one_error_line(CliRunner().invoke(main, ["sweep", str(sweep), "--dry-run"]), "nested too deeply")


def test_a_sweep_file_nested_50000_deep_is_one_line(tmp_path, monkeypatch):
    import yaml

    sweep = tmp_path / "s.yaml"
    sweep.write_text("notebook: 01_load_sweep\ncampaign: c\nparameters:\n  x: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with defaults.set_data_root(tmp_path):
        one_error_line(CliRunner().invoke(main, ["sweep", str(sweep), "--dry-run"]), "not valid YAML")
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)  # PyYAML without libyaml: its own recursive loader
        one_error_line(CliRunner().invoke(main, ["sweep", str(sweep), "--dry-run"]), "nested too deeply")


def test_a_planted_output_notebook_is_not_completed_whatever_it_holds(tmp_path):
    from workbench.cli.sweep.execute import point_completed

    out = tmp_path / "point.ipynb"
    for text in (DEEP, "[1]", '{"metadata": []}', '{"metadata": {"workbench": "x"}}'):
        out.write_text(text)
        assert point_completed(out) is False


def test_a_header_nested_too_deep_is_not_ours(tmp_path):
    from workbench.output.origin import written_by_workbench

    deep = "[" * 30_000 + "]" * 30_000
    header = ('{"__metadata__": ' + deep + "}").encode()
    head = struct.pack("<Q", len(header)) + header
    assert written_by_workbench("m.safetensors", head, len(head)) is False  # the demo's re-make: not replaced
    index = ('{"metadata": ' + deep + "}").encode()
    assert written_by_workbench("m.safetensors.index.json", index, len(index)) is False


def test_a_legal_248_byte_output_name_is_written(tmp_path):
    for length in (248, 255):
        name = "m" * (length - len(".gguf")) + ".gguf"
        result = CliRunner().invoke(main, ["synth", str(tmp_path / name), "--format", "gguf", "--size", "1MiB"])
        assert result.exit_code == 0, result.output
        assert (tmp_path / name).is_file()
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
    export = "e" * 244 + ".csv"
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, ["ledger", "export", "--csv", str(tmp_path / export), "--ledger", str(ledger)])
    assert "File name too long" not in result.output, result.output


def test_the_dump_round_trip_still_reads_a_shallow_dump(tmp_path):
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"ledger": "x", "error": "e", "attempts": "no"}))
    result = CliRunner().invoke(main, ["ledger", "import-unrecorded", str(dump), "--ledger", str(tmp_path / "l.sqlite")])
    one_error_line(result, "'attempts' should be list")
