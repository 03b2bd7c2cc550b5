"""The package's shape: ``import workbench`` stays light, its public names resolve on first use, and a
worker process imports what it runs and nothing of the runner, the ledger or the user-facing layer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = {"numpy", "pandas", "plotly", "papermill", "cuda", "hip", "xxhash", "gguf", "safetensors", "click",
         "yaml", "IPython", "ipywidgets", "tqdm"}


def _modules(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_import_workbench_loads_nothing_heavy() -> None:
    modules = _modules("import workbench")
    assert sorted({m.split(".")[0] for m in modules} & HEAVY) == []
    assert [m for m in modules if m.startswith("workbench")] == ["workbench", "workbench.errors"]


def test_public_names_resolve_on_first_use() -> None:
    import workbench

    for name in workbench.__all__:
        assert getattr(workbench, name) is not None, name
        assert name in dir(workbench)
    assert workbench.Ledger.__module__ == "workbench.ledger.store"
    with pytest.raises(AttributeError):
        workbench.no_such_name  # noqa: B018


def test_the_command_line_group_loads_no_measurement() -> None:
    modules = _modules("import workbench.cli")
    assert sorted({m.split(".")[0] for m in modules} & (HEAVY - {"click"})) == []


def test_a_worker_imports_what_it_runs_only(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.formats.synth import write_synthetic

    model = tmp_path / "m.gguf"
    write_synthetic(model, format="gguf", layout="dense", size=256 << 10)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"file": str(model), "strategy": "pread"}))
    code = (f"import contextlib, io, runpy, sys\nsys.argv = ['worker', {str(config)!r}]\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        runpy.run_module('workbench.measure.run.worker', run_name='__main__')\n"
            "    except SystemExit as exc:\n        assert exc.code == 0, exc.code\n"
            "assert '\"verified\": true' in out.getvalue()")
    modules = _modules(code)
    assert sorted({m.split(".")[0] for m in modules} & {"pandas", "plotly", "papermill", "click", "IPython"}) == []
    ours = {m for m in modules if m.startswith("workbench.")}
    assert not {m for m in ours if m.startswith(("workbench.ledger", "workbench.cli", "workbench.measure.run.runner"))}
    assert {"workbench.records", "workbench.measure.run.verify", "workbench.strategies.pread"} <= ours
