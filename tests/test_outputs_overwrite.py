"""Issue 19, class 3: no command writes over its own input, nor over an existing ledger or model file
without --force; outputs go through a new file and a rename, so a link planted at the output path or at
a fixed temporary name is replaced, never followed."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.formats import open_index
from workbench.ledger import Ledger


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "\n" not in text and all(n in text for n in needles), text


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "l.sqlite"
    fill_ledger(path)
    return path


def sound(path: Path) -> None:
    with Ledger(path, readonly=True) as led:
        assert len(led.attempts()) == 3


@pytest.mark.parametrize("force", [[], ["--force"]])
@pytest.mark.parametrize("name", ["itself", "hard link", "symlink", "wal"])
def test_export_never_writes_over_the_ledger_it_reads(tmp_path, ledger, name, force):
    with Ledger(ledger) as led:  # hold it open so its -wal exists
        target = {"itself": ledger, "hard link": tmp_path / "alias.md", "symlink": tmp_path / "link.md",
                  "wal": Path(f"{ledger}-wal")}[name]
        if name == "hard link":
            os.link(ledger, target)
        if name == "symlink":
            os.symlink(ledger, target)
        before = sha(ledger)
        for option in ("--markdown", "--csv"):
            out = cli("ledger", "--ledger", ledger, "export", option, target, *force)
            one_line(out, "refusing to write over its own input")
        assert sha(ledger) == before and led.attempts().shape[0] == 3
    sound(ledger)


def test_export_over_another_ledger_or_a_model_needs_force(tmp_path, ledger, synth_model):
    other = tmp_path / "other.sqlite"
    fill_ledger(other, host="rig-b")
    model = Path(synth_model("gguf", "dense").path)
    copy = tmp_path / "m.gguf"
    copy.write_bytes(model.read_bytes())
    st = tmp_path / "m.safetensors"
    st.write_bytes(Path(synth_model("safetensors", "dense").path).read_bytes())
    for target, kind in ((other, "an SQLite database"), (copy, "a GGUF model"), (st, "a safetensors model")):
        before = sha(target)
        one_line(cli("ledger", "--ledger", ledger, "export", "--markdown", target), kind, "--force")
        assert sha(target) == before
    out = cli("ledger", "--ledger", ledger, "export", "--markdown", other, "--force")
    assert out.exit_code == 0 and other.read_text().startswith("**Machine**"), out.output


def test_export_replaces_a_planted_link_instead_of_following_it(tmp_path, ledger):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "table.md"
    os.symlink(victim, link)
    assert cli("ledger", "--ledger", ledger, "export", "--markdown", link).exit_code == 0
    assert victim.read_text() == "keep me\n" and not link.is_symlink() and "| attempt |" in link.read_text()


def test_synth_never_writes_over_a_ledger_or_a_model_without_force(tmp_path, ledger):
    before = sha(ledger)
    one_line(cli("synth", ledger, "--format", "gguf", "--size", "256KiB"), "an SQLite database", "--force")
    assert sha(ledger) == before
    sound(ledger)
    model = tmp_path / "m.gguf"
    assert cli("synth", model, "--format", "gguf", "--size", "256KiB").exit_code == 0
    first = sha(model)
    one_line(cli("synth", model, "--format", "gguf", "--size", "256KiB", "--seed", "1"), "a GGUF model")
    assert sha(model) == first
    out = cli("synth", model, "--format", "gguf", "--size", "256KiB", "--seed", "1", "--force")
    assert out.exit_code == 0 and sha(model) != first and len(open_index(model)) > 0


def test_synth_of_a_sharded_set_refuses_an_existing_shard(tmp_path):
    out = tmp_path / "set"
    assert cli("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "2").exit_code == 0
    shards = sorted(out.iterdir())
    before = {p.name: sha(p) for p in shards}
    one_line(cli("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "2", "--seed", "3"),
             "a safetensors model")
    assert {p.name: sha(p) for p in sorted(out.iterdir())} == before


def test_synth_never_follows_a_link_planted_at_its_temporary_name(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root:secret\n")
    model = tmp_path / "m.gguf"
    os.symlink(victim, tmp_path / "m.gguf.partial")  # the fixed name the writer used to use
    assert cli("synth", model, "--format", "gguf", "--size", "256KiB").exit_code == 0
    assert victim.read_text() == "root:secret\n" and len(open_index(model)) > 0


def test_a_report_replaces_a_planted_link_and_never_lands_on_its_ledger(tmp_path, ledger):
    from workbench.errors import OutputError
    from workbench.ledger.report import write_report

    out = tmp_path / "report"
    out.mkdir()
    victim = tmp_path / "victim.html"
    victim.write_text("<p>keep</p>")
    os.symlink(victim, out / "report.html")
    with Ledger(ledger, readonly=True) as led:
        paths = write_report(led, "c", out)
    assert victim.read_text() == "<p>keep</p>" and "<table" in paths.html.read_text()
    again = tmp_path / "again"
    again.mkdir()
    os.link(ledger, again / "report.md")  # the ledger under the report's name: its own input
    with Ledger(ledger, readonly=True) as led, pytest.raises(OutputError, match="its own input"):
        write_report(led, "c", again)
    sound(ledger)


# -- second adversarial pass (issue 19 "Done when"): every file of --figures and a report's figures/ -------

@pytest.mark.static_figures
@pytest.mark.parametrize("name, force", [("figures.html", []), ("gbps.png", ["--force"]), ("median.svg", [])])
def test_export_figures_never_write_over_the_ledger_through_a_planted_link(tmp_path, ledger, name, force):
    figures = tmp_path / "figs"
    figures.mkdir()
    os.symlink(ledger, figures / name)  # planted where a figure goes: it must not carry the figure to the ledger
    before = sha(ledger)
    out = cli("ledger", "--ledger", ledger, "export", "--figures", figures, "--campaign", "c", *force)
    if name != "figures.html" and not (figures / "gbps.svg").exists() and out.exit_code == 0:
        pytest.skip("no browser draws the static images here")
    one_line(out, "refusing to write over its own input")
    assert sha(ledger) == before and os.path.islink(figures / name)
    sound(ledger)


def test_export_figures_replace_a_link_to_another_file_instead_of_writing_through_it(tmp_path, ledger):
    figures = tmp_path / "figs"
    figures.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, figures / "figures.html")
    out = cli("ledger", "--ledger", ledger, "export", "--figures", figures, "--campaign", "c")
    assert out.exit_code == 0, out.output
    assert victim.read_text() == "keep me\n" and not os.path.islink(figures / "figures.html")
    assert (figures / "figures.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.static_figures
def test_a_reports_figure_never_lands_on_its_ledger(tmp_path, ledger):
    from workbench.errors import OutputError
    from workbench.ledger.report import write_report
    from workbench.ledger.figures.static import render_static

    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    os.symlink(ledger, out / "figures" / "gbps.png")
    before = sha(ledger)
    with Ledger(ledger, readonly=True) as led:
        from workbench.ledger.report import all_figures

        if not render_static(all_figures(led, "c"), scale=1.0).images:
            pytest.skip("no browser draws the static images here")
        with pytest.raises(OutputError, match="its own input"):
            write_report(led, "c", out)
    assert sha(ledger) == before and not (out / "report.md").exists() and not (out / "attempts.csv").exists()


def _fake_papermill(monkeypatch) -> list[str]:
    """papermill writes its output notebook by name (``open(path, "w")``): this does the same, without a kernel."""
    import json as _json

    import papermill

    ran: list[str] = []

    def execute_notebook(input_path, output_path, **kwargs):
        ran.append(output_path)
        with open(output_path, "w", encoding="utf-8") as fh:
            _json.dump({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, fh)

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    return ran


@pytest.mark.parametrize("where", ["output", "stamp"])
def test_a_sweep_never_writes_its_notebooks_through_a_link_planted_in_its_output_directory(
        tmp_path, ledger, monkeypatch, where):
    """A link at a point's output notebook, or at the old fixed ``.ipynb.tmp`` name the completion stamp
    was written through, aimed at the ledger: the sweep must neither write through it nor run."""
    import yaml

    from workbench.cli.sweep.execute import expand_grid, load_sweep, run_sweep

    doc = {"notebook": "05_ledger_report", "campaign": "c", "parameters": {"out_dir": str(tmp_path / "r")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    sweep = load_sweep(tmp_path / "s.yaml")
    out = tmp_path / "runs"
    out.mkdir()
    output = expand_grid(sweep)[0].output(out)
    os.symlink(ledger, output if where == "output" else output.with_suffix(".ipynb.tmp"))
    ran = _fake_papermill(monkeypatch)
    before = sha(ledger)
    if where == "output":  # aimed at the ledger the sweep records to: refused before any point runs
        from workbench.errors import OutputError

        with pytest.raises(OutputError, match="its own input"):
            run_sweep(sweep, ledger_path=ledger, out_dir=out, progress=False)
        assert ran == []
    else:
        report = run_sweep(sweep, ledger_path=ledger, out_dir=out, progress=False)
        assert [o.status for o in report.outcomes] == ["done"] and not output.is_symlink()
    assert sha(ledger) == before
    sound(ledger)


def test_a_sweep_replaces_a_link_at_its_output_notebook_instead_of_following_it(tmp_path, ledger, monkeypatch):
    import yaml

    from workbench.cli.sweep.execute import expand_grid, load_sweep, run_sweep

    doc = {"notebook": "05_ledger_report", "campaign": "c", "parameters": {"out_dir": str(tmp_path / "r")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    sweep = load_sweep(tmp_path / "s.yaml")
    out = tmp_path / "runs"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, expand_grid(sweep)[0].output(out))
    _fake_papermill(monkeypatch)
    run_sweep(sweep, ledger_path=ledger, out_dir=out, progress=False)
    assert victim.read_text() == "keep me\n"


def test_synth_of_another_shard_count_never_re_points_an_existing_sets_index(tmp_path):
    """Three shards over a set of two: new shard names, but the same index file, which would then name
    the new shards: the set of two is gone. The index is part of a model and needs --force."""
    out = tmp_path / "set"
    assert cli("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "2").exit_code == 0
    before = {p.name: sha(p) for p in sorted(out.iterdir())}
    one_line(cli("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "3"),
             "model.safetensors.index.json", "a safetensors index")
    assert {p.name: sha(p) for p in sorted(out.iterdir())} == before
    assert len(open_index(out).files) == 2
    assert cli("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "3", "--force").exit_code == 0
    assert len(open_index(out / "model.safetensors.index.json").files) == 3
