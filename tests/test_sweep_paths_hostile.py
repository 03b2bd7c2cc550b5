"""Issue 19, class 6: a sweep's path parameters are confined by the notebook's declaration, not by their
names; campaign names cannot be ``.``, ``..`` or hold a separator. All refused in one line before a
kernel starts (no kernel starts in these tests)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.cli.sweep.execute import default_out_dir, load_sweep, notebooks_dir
from workbench.errors import LedgerError, SweepError


@pytest.fixture()
def data(tmp_path: Path):
    root = tmp_path / "data"
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"x")
    (tmp_path / "outside.gguf").write_bytes(b"x")
    with defaults.set_data_root(root):
        yield root


def sweep(tmp_path: Path, notebook: str, parameters: dict, campaign: str = "c") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"notebook": notebook, "campaign": campaign, "parameters": parameters}))
    return path


def refused(path: Path, *needles: str) -> None:
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    text = str(err.value)
    assert "\n" not in text and all(n in text for n in needles), text
    out = CliRunner().invoke(main, ["sweep", str(path), "--dry-run"])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and needles[0] in out.output, out.output


@pytest.mark.parametrize("notebook, parameters, name", [
    ("03_expert_slices", {"file_64": "../outside.gguf"}, "file_64"),  # not a name the old rule knew
    ("03_expert_slices", {"file_32": "models/../../outside.gguf"}, "file_32"),
    ("06_engine_ab", {"binaries": ["models/m.gguf", "../outside.gguf"]}, "binaries"),
    ("06_engine_ab", {"out_dir": "../../elsewhere"}, "out_dir"),
    ("05_ledger_report", {"out_dir": ".."}, "out_dir"),
])
def test_a_declared_path_parameter_leaving_the_data_root_is_refused(tmp_path, data, notebook, parameters, name):
    refused(sweep(tmp_path, notebook, parameters), f"parameter '{name}'", "leaves the data root")


def test_a_link_inside_the_data_root_that_leads_out_of_it_is_refused(tmp_path, data):
    os.symlink(tmp_path / "outside.gguf", data / "models" / "link.gguf")
    refused(sweep(tmp_path, "03_expert_slices", {"file_64": "models/link.gguf"}), "parameter 'file_64'",
            "leaves the data root")


def test_declared_paths_inside_the_data_root_are_resolved_and_model_files_must_exist(tmp_path, data):
    loaded = load_sweep(sweep(tmp_path, "06_engine_ab", {"binaries": ["models/m.gguf"], "out_dir": "reports/x"}))
    assert loaded.parameters == {"binaries": [str(data / "models" / "m.gguf")], "out_dir": str(data / "reports/x")}
    path = sweep(tmp_path, "03_expert_slices", {"file_64": "models/missing.gguf"})
    with pytest.raises(SweepError, match="parameter 'file_64': .*missing.gguf: no such file"):
        from workbench.cli.sweep.execute import run_sweep

        run_sweep(load_sweep(path), ledger_path=tmp_path / "l.sqlite", progress=False)


def test_a_notebook_of_ones_own_declares_its_paths(tmp_path, data):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell('weights = ""\nlabel = ""\n')
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["workbench"] = {"path_parameters": {"weights": "model"}}
    nbformat.write(nb, tmp_path / "own.ipynb")
    refused(sweep(tmp_path, str(tmp_path / "own.ipynb"), {"weights": "../outside.gguf"}), "parameter 'weights'")
    assert load_sweep(sweep(tmp_path, str(tmp_path / "own.ipynb"), {"label": "../not-a-path"})).parameters == \
        {"label": "../not-a-path"}  # undeclared and no path by name: a plain string
    nb.metadata["workbench"] = {"path_parameters": {"weights": "executable"}}
    nbformat.write(nb, tmp_path / "own.ipynb")
    refused(sweep(tmp_path, str(tmp_path / "own.ipynb"), {"label": "x"}), "path_parameters must map")


def test_every_shipped_notebook_declares_its_path_parameters():
    import papermill

    from workbench.cli.sweep.params import path_parameters

    expected = {
        "01_load_sweep": {"file": "model", "ledger_path": "ledger"},
        "02_h2d_microbench": {"ledger_path": "ledger"},
        "03_expert_slices": {"file_64": "model", "file_32": "model", "ledger_path": "ledger"},
        "04_long_session": {"file": "model", "ledger_path": "ledger"},
        "05_ledger_report": {"ledger_path": "ledger", "out_dir": "directory"},
        "06_engine_ab": {"file": "model", "binaries": "files", "ledger_path": "ledger", "out_dir": "directory"},
        "07_traces": {"trace": "file", "file": "model", "ledger_path": "ledger"},
    }
    packaged = Path(__file__).resolve().parent.parent / "workbench" / "cli" / "notebooks"
    for stem, kinds in expected.items():
        for folder in (notebooks_dir(), packaged):
            nb = folder / f"{stem}.ipynb"
            declared = json.loads(nb.read_text())["metadata"]["workbench"]["path_parameters"]
            assert declared == kinds, (nb, declared)
            assert set(declared) <= set(papermill.inspect_notebook(str(nb))), nb
            assert path_parameters(nb, papermill.inspect_notebook(str(nb))) == kinds


@pytest.mark.parametrize("campaign", ["..", ".", " .. ", "a/b", "../up", "x\\y", "tab\there"])
def test_a_campaign_name_that_is_no_directory_name_is_refused(tmp_path, data, campaign):
    refused(sweep(tmp_path, "01_load_sweep", {}, campaign=campaign), "campaign")
    with pytest.raises(SweepError):
        default_out_dir(campaign)
    from workbench.ledger.report import report_dir

    with pytest.raises(LedgerError):
        report_dir(campaign)
    assert not (data / "runs").exists()


# -- second adversarial pass (issue 19 "Done when"): the YAML itself --------------------------------------

def _laughs(levels: int = 9) -> str:
    """A list that YAML's aliases expand to 10**levels strings (each level ten aliases of the one below)."""
    inner = "&l0 [" + ", ".join(["models/m.gguf"] * 10) + "]"
    for i in range(1, levels + 1):
        inner = f"&l{i} [{inner}, " + ", ".join([f"*l{i - 1}"] * 9) + "]"
    return inner


@pytest.mark.parametrize("binaries", [_laughs(), "&me [models/m.gguf, *me]"], ids=["alias bomb", "alias of itself"])
def test_a_sweep_whose_aliases_expand_without_bound_is_refused_at_once(tmp_path, data, binaries):
    import time

    path = tmp_path / "s.yaml"
    path.write_text(f"notebook: 06_engine_ab\ncampaign: c\nparameters:\n  binaries: {binaries}\n")
    start = time.monotonic()
    refused(path, "values once its YAML aliases are expanded")
    assert time.monotonic() - start < 20  # both the load and the CLI's dry run


@pytest.mark.parametrize("text, key", [
    ("notebook: 01_load_sweep\ncampaign: c\nparameters:\n  1: x\n", "1"),
    ("notebook: 01_load_sweep\ncampaign: c\ngrid:\n  2026-12-02: [1]\n", "datetime.date(2026, 12, 2)"),
    ("notebook: 01_load_sweep\ncampaign: c\nnull: 3\n", "None"),
    ("notebook: 01_load_sweep\ncampaign: c\nparameters:\n  true: x\n", "True"),
])
def test_a_key_that_is_not_a_name_is_one_line(tmp_path, data, text, key):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    refused(path, f"key {key} of", "is not a name")


def test_aliases_that_share_values_are_still_fine(tmp_path, data):
    path = tmp_path / "s.yaml"
    path.write_text("notebook: 01_load_sweep\ncampaign: c\nparameters:\n  strategies: &s [pread, mmap]\n"
                    "  params: {warmer: {threads: 2}}\ngrid:\n  caches: [[cold], [warm]]\n")
    assert load_sweep(path).parameters["strategies"] == ["pread", "mmap"]
