"""Issue 24 §1: writes never follow a directory the workbench did not make, and no implicit rewrite
replaces a file the workbench did not write.

The data root and a folder in it may be links (a user pointing ``data/models`` at another disk); the
directories the workbench makes below them (a set's, a report's, a sweep's runs, a figures directory)
are reached with ``O_NOFOLLOW`` one step at a time and written relative to their descriptor. The demo
re-making a broken model replaces only files the workbench wrote (their header carries
``workbench.synth``): never a ledger, a real model (gguf-py's, safetensors', huggingface_hub's writer)
or a text file of the user's."""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from foreign_writers import write_gguf_split, write_hub_checkpoint
from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.errors import OutputError
from workbench.output.outdir import OutDir


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) and its content's hash."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def one_error_line(result, *needles: str) -> str:
    """Exit 2, no traceback, and the error one line on stderr (after the progress bar's redraws)."""
    assert result.exit_code == 2 and "Traceback" not in result.stderr, result.output
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), result.stderr
    return lines[0]


@pytest.fixture
def elsewhere(tmp_path: Path, synth_model) -> Path:
    """A directory outside the data root holding what the issue's demo wrote over: a text file and a
    real shard, at the names of the demo set's members."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "model-00001-of-00003.gguf").write_text("my notes\n")
    real = Path(synth_model("gguf", "dense", size=1 << 20).path).read_bytes()
    (outside / "model-00002-of-00003.gguf").write_bytes(real)
    return outside


def test_demo_never_writes_into_a_set_directory_that_is_a_link(tmp_path, elsewhere):
    # The break: `workbench demo --shards 3` with data/models/demo-dense-1MiB-3shards a link to a
    # directory elsewhere replaced the text file and the real shard there with synthetic splits.
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / "demo-dense-1MiB-3shards").symlink_to(elsewhere, target_is_directory=True)
    before = tree(elsewhere)
    out = CliRunner().invoke(main, ["demo", "--shards", "3", "--size", "1MiB", "--runs", "1",
                                    "--out", str(tmp_path / "data")])
    one_error_line(out, "demo-dense-1MiB-3shards", "is a link", "never writes through a link")
    assert tree(elsewhere) == before


def test_the_data_root_and_a_folder_in_it_may_be_links(tmp_path):
    # A user's choice: data/ itself and data/models on another disk. What the workbench makes below
    # them (the set's directory) is its own, made there.
    from workbench.cli.notebooks.actions import ensure_model

    disk = tmp_path / "disk"
    (disk / "models").mkdir(parents=True)
    (tmp_path / "data").symlink_to(disk, target_is_directory=True)
    path = tmp_path / "data" / "models" / "demo-dense-1MiB-3shards"
    ensure_model(path, layout="dense", format="gguf", size="1MiB", shards=3)
    assert len(list((disk / "models" / "demo-dense-1MiB-3shards").iterdir())) == 3
    moved = tmp_path / "other-disk"
    moved.mkdir()
    (disk / "reports").symlink_to(moved, target_is_directory=True)
    with OutDir.open(tmp_path / "data" / "reports" / "demo", made=1) as d:
        d.write_bytes("report.md", b"# r\n")
    assert (moved / "demo" / "report.md").read_bytes() == b"# r\n"


@pytest.mark.parametrize("made", [1, 2])
def test_a_link_anywhere_in_the_made_part_is_refused(tmp_path, made):
    victim = tmp_path / "victim"
    victim.mkdir()
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    if made == 1:
        (root / "a" / "b").symlink_to(victim)
    else:
        (root / "a").rmdir()
        (root / "a").symlink_to(victim)
    with pytest.raises(OutputError, match="is a link"):
        OutDir.open(root / "a" / "b", made=made)
    assert list(victim.iterdir()) == []


def _broken_set(tmp_path: Path) -> Path:
    from workbench.cli.notebooks.actions import ensure_model

    path = tmp_path / "models" / "demo-dense-1MiB-3shards"
    ensure_model(path, layout="dense", format="gguf", size="1MiB", shards=3)
    (path / "model-00003-of-00003.gguf").unlink()  # broken: the demo would write it again
    return path


def test_a_ledger_at_a_members_name_in_a_broken_set_is_never_replaced(tmp_path):
    # The second break: the set branch of ensure_model wrote with force=True over a ledger.
    from workbench.cli.notebooks.actions import ensure_model

    path = _broken_set(tmp_path)
    ledger = path / "model-00002-of-00003.gguf"
    ledger.unlink()
    fill_ledger(ledger)
    before = ledger.read_bytes()
    with pytest.raises(OutputError, match="SQLite database.*the workbench did not write"):
        ensure_model(path, layout="dense", format="gguf", size="1MiB", shards=3)
    assert ledger.read_bytes() == before
    assert sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 3


@pytest.mark.parametrize("what", ["text", "gguf-py split", "huggingface_hub shard", "link"])
def test_a_broken_set_is_rewritten_over_nothing_the_workbench_did_not_write(tmp_path, what):
    from workbench.cli.notebooks.actions import ensure_model

    path = _broken_set(tmp_path)
    member = path / "model-00001-of-00003.gguf"
    member.unlink()
    if what == "text":
        member.write_text("my notes\n")
    elif what == "gguf-py split":
        write_gguf_split(tmp_path / "real.gguf")
        os.replace(tmp_path / "real-00001-of-00003.gguf", member)
    elif what == "huggingface_hub shard":
        write_hub_checkpoint(tmp_path / "hub", max_shard_size=10 ** 9)
        os.replace(tmp_path / "hub" / "model.safetensors", member)
    else:
        (tmp_path / "target").write_text("theirs\n")
        member.symlink_to(tmp_path / "target")
    before = tree(tmp_path)
    with pytest.raises(OutputError, match="did not write|is a link"):
        ensure_model(path, layout="dense", format="gguf", size="1MiB", shards=3)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_the_workbenchs_own_broken_files_are_rewritten(tmp_path, fmt):
    # The rewrite the demo exists for: a member missing, another cut short by an old interrupted run.
    from workbench.cli.notebooks.actions import ensure_model
    from workbench.formats import open_index

    path = tmp_path / "set"
    ensure_model(path, layout="dense", format=fmt, size="1MiB", shards=3)
    first = sorted(path.glob(f"*.{fmt}"))[0]
    with open(first, "r+b") as fh:
        fh.truncate(first.stat().st_size // 2)
    ensure_model(path, layout="dense", format=fmt, size="1MiB", shards=3)
    assert len(open_index(path).files) == 3


def test_origin_reads_the_mark_and_nothing_else(tmp_path, synth_model):
    from workbench.formats.synth import write_synthetic
    from workbench.output.origin import written_by_workbench

    def ours(p: Path) -> bool:
        return written_by_workbench(p.name, p.read_bytes()[:1 << 20], p.stat().st_size)

    write_synthetic(tmp_path / "s", format="safetensors", layout="dense", size=1 << 20, shards=2)
    assert all(ours(p) for p in (tmp_path / "s").iterdir())  # both shards and the index
    assert ours(Path(synth_model("gguf", "moe").path))
    write_gguf_split(tmp_path / "g.gguf", split_max_tensors=4)
    write_hub_checkpoint(tmp_path / "hub")
    foreign = [*tmp_path.glob("g-*.gguf"), *(tmp_path / "hub").iterdir()]
    assert len(foreign) >= 4 and not any(ours(p) for p in foreign)
