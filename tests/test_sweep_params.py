"""Sweep values type-checked against the notebook's parameters, and path parameters resolved inside the
data root unless absolute — all before any point runs (no kernel starts in these tests)."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.cli.sweep.execute import check_parameters, expand_grid, load_sweep, run_sweep
from workbench.errors import SweepError

PARAMS = ('runs = 3\ngate = 0.5\nverify = True\nname = "x"\ncaches = ["cold", "warm"]\nsizes = [1, 8]\n'
          'params = {"a": 1}\nanything = None\nmixed = [1, "a"]\nannotated: int = None\nfile = ""\n'
          'out_dir = ""\n')


@pytest.fixture()
def space(tmp_path: Path) -> dict[str, Path]:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(PARAMS)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell("pass")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "typed.ipynb")
    root = tmp_path / "data"
    (root / "models").mkdir(parents=True)
    (root / "models" / "m.gguf").write_bytes(b"x")
    with defaults.set_data_root(root):
        yield {"root": tmp_path, "nb": tmp_path / "typed.ipynb", "data": root}


def sweep_file(space: dict[str, Path], parameters: dict | None = None, grid: dict | None = None) -> Path:
    path = space["root"] / "s.yaml"
    path.write_text(json.dumps({"notebook": str(space["nb"]), "campaign": "c", "parameters": parameters or {},
                                "grid": grid or {}}))
    return path


@pytest.mark.parametrize("parameters, grid, needle", [
    ({"runs": "5"}, None, "parameter 'runs' = '5': typed.ipynb takes an integer (its default is 3)"),
    ({"runs": True}, None, "parameter 'runs' = True: typed.ipynb takes an integer"),  # YAML true is no number
    ({"runs": 2.5}, None, "takes an integer"),
    ({"gate": "high"}, None, "parameter 'gate' = 'high': typed.ipynb takes a float (its default is 0.5)"),
    ({"verify": 1}, None, "parameter 'verify' = 1: typed.ipynb takes a bool"),
    ({"name": 7}, None, "takes a str"),
    ({"params": [1]}, None, "takes a dict"),
    ({"annotated": "1"}, None, "takes an integer"),  # the annotation wins over the None default
    (None, {"caches": [["cold"], "warm"]},
     "parameter 'caches' (grid value 2) = 'warm': typed.ipynb takes a list of str"),
    (None, {"caches": [["cold", 1]]}, "takes a list of str"),
    (None, {"sizes": [[1, 8], [64, "256"]]}, "parameter 'sizes' (grid value 2)"),
])
def test_a_value_of_the_wrong_type_is_one_line_before_any_point(space, parameters, grid, needle):
    path = sweep_file(space, parameters, grid)
    with pytest.raises(SweepError) as err:
        check_parameters(load_sweep(path))
    assert needle in str(err.value) and str(path) in str(err.value)
    result = CliRunner().invoke(main, ["sweep", str(path), "--dry-run"])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_values_of_the_right_type_pass(space):
    path = sweep_file(space, {"runs": 5, "gate": 1, "verify": False, "name": "y", "params": {"b": [1, 2]},
                              "anything": [{"z": None}], "mixed": ["a", 2.5], "annotated": 4},
                      {"caches": [["cold"], ["warm", "asis"]], "sizes": [[1], [64, 256]]})
    assert check_parameters(load_sweep(path)) >= {"runs", "caches"}  # an int where a float is taken is fine


def test_relative_paths_resolve_inside_the_data_root(space):
    outside = space["root"] / "elsewhere.gguf"
    outside.write_bytes(b"y")
    path = sweep_file(space, {"out_dir": "reports/r1", "name": "models/not-a-path"},
                      {"file": ["models/m.gguf", str(outside), ""]})
    sweep = load_sweep(path)
    check_parameters(sweep)
    data = space["data"].resolve()
    assert sweep.parameters["out_dir"] == str(data / "reports" / "r1")
    assert sweep.parameters["name"] == "models/not-a-path"  # not a path parameter: untouched
    assert sweep.grid["file"] == [str(data / "models" / "m.gguf"), str(outside), ""]  # "" keeps its default
    assert [p.params["file"] for p in expand_grid(sweep)] == sweep.grid["file"]


@pytest.mark.parametrize("value, needle", [
    ("../../etc/passwd", "leaves the data root"),
    ("models/../../x.gguf", "leaves the data root"),
    ("models/missing.gguf", "no such file"),
])
def test_paths_outside_the_data_root_or_missing_are_refused(space, value, needle):
    path = sweep_file(space, {"file": value})
    with pytest.raises(SweepError, match=needle):
        run_sweep(load_sweep(path), ledger_path=space["root"] / "l.sqlite", out_dir=space["root"] / "runs",
                  progress=False)
    assert not (space["root"] / "runs").exists()  # refused before anything was made


def test_the_shipped_sweeps_type_check_against_the_shipped_notebooks(tmp_path):
    from workbench.cli.sweep.execute import _declared_parameters
    from workbench.cli.sweep.params import check_types

    shipped = sorted((Path(__file__).parent.parent / "data" / "sweeps").glob("*.yaml"))
    assert shipped
    with defaults.set_data_root(tmp_path):
        for path in shipped:
            sweep = load_sweep(path)
            check_types(sweep.path, sweep.notebook, _declared_parameters(sweep.notebook), sweep.parameters,
                        sweep.grid)
            for value in [sweep.parameters.get("file"), *sweep.grid.get("file", [])]:
                assert value is None or str(value).startswith(str(tmp_path.resolve() / "models")), (path, value)
