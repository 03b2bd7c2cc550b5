"""Issue 17 §5: notebooks and sweeps take a model of several files — a directory, an index json or a
shard — and notebook 01 shows each file's residency before and after every run (batch and Run button)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from workbench.settings import defaults
from workbench.cli.notebooks.actions import load_sweep_panel, model_choices
from workbench.cli.sweep.execute import load_sweep, run_sweep
from workbench.errors import SweepError
from workbench.formats.synth import write_synthetic
from workbench.ledger import Ledger

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nbsets") / "data"
    model = root / "models" / "tiny-sharded"
    index = write_synthetic(model, format="safetensors", layout="dense", size=3 << 20, seed=5, shards=3)
    for f in index.files:  # written back to disk: a cold run must be able to evict every shard
        fd = os.open(f.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    write_synthetic(root / "models" / "one.gguf", format="gguf", layout="dense", size=1 << 20, seed=6)
    (root / "models" / "empty").mkdir()
    return {"root": root, "model": model, "ledger": root / "ledger.sqlite"}


@pytest.fixture(autouse=True)
def private(space, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))  # other suites hold the host lock
    monkeypatch.setenv(defaults.DATA, str(space["root"]))


def outputs(nb: dict) -> list[dict]:
    return [o for c in nb["cells"] for o in c.get("outputs", [])]


def test_notebook_01_on_a_model_directory_shows_each_files_residency(space, tmp_path):
    import papermill

    out = tmp_path / "01.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / "01_load_sweep.ipynb"), str(out), kernel_name="python3",
                               parameters=dict(file=str(space["model"]), strategies=["pread"], params={},
                                               caches=["cold", "warm"], runs=1, campaign="sets-01",
                                               ledger_path=str(space["ledger"])),
                               progress_bar=False, extra_arguments=["--IPKernelApp.log_level=ERROR"])
    nb = json.loads(out.read_text())
    with Ledger(space["ledger"]) as ledger:
        attempts, runs = ledger.attempts("sets-01"), ledger.runs(campaign="sets-01")
    assert len(attempts) == 2 and runs["error"].isna().all() and runs["verified"].all()
    by_cache = {r["cache_state"]: r for r in runs.to_dict("records")}
    for name in SHARDS:  # the runner set and checked every shard; the worker saw what its load left
        assert by_cache["cold"]["resident_files"][name] <= 0.02 and by_cache["warm"]["resident_files"][name] >= 0.98
        assert name in by_cache["cold"]["result"]["resident_after_files"]
    page = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs(nb))
    table = page[page.index('class="wb-resident-files"'):]
    assert "Resident per file (4 files" in page  # three shards and the index json
    assert all(name in table for name in SHARDS) and "cold: before" in table and "warm: after" in table
    figure = next(o["data"]["application/vnd.plotly.v1+json"] for o in outputs(nb)
                  if "application/vnd.plotly.v1+json" in o.get("data", {})
                  and o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"].startswith("Resident per file"))
    before, after = figure["data"]
    assert set(SHARDS) <= set(before["y"]) and len(before["x"]) == 2 and before["zmax"] == 1


def test_the_run_button_shows_the_per_file_table_and_figure(space, monkeypatch):
    import plotly.graph_objects as go

    from workbench.cli.notebooks import ui as notebook_ui

    shown: list = []  # what the button's output area displays (outside a kernel, display() prints)
    monkeypatch.setattr(notebook_ui, "_show_all", lambda items: shown.extend(items))
    panel = load_sweep_panel(file=str(space["model"] / "model.safetensors.index.json"), strategies=["mmap"],
                             params={}, caches=["cold"], runs=1, device="host", campaign="sets-button",
                             ledger=str(space["ledger"]))
    panel.button.click()
    assert "finished" in panel.status.value, panel.status.value
    html = "".join(str(getattr(i, "data", "")) for i in shown if not isinstance(i, go.Figure))
    titles = [i.layout.title.text for i in shown if isinstance(i, go.Figure)]
    assert 'class="wb-resident-files"' in html and SHARDS[2] in html and "cold: after" in html
    assert any(t.startswith("Resident per file, before and after each run") for t in titles)


def test_a_one_file_model_has_no_per_file_table_or_figure(space):
    from workbench.cli.notebooks.actions import show_attempts
    from workbench.measure.run.runner import measure
    from workbench.records import RunConfig

    results = measure([RunConfig(str(space["root"] / "models" / "one.gguf"), "pread", {}, "host")], runs=1,
                      cache="warm", ledger=space["ledger"], campaign="sets-one")
    items = show_attempts(space["ledger"], "sets-one", [r.attempt_id for r in results])
    text = " ".join(str(getattr(i, "data", "")) + str(getattr(i, "layout", "")) for i in items)
    assert "wb-resident-files" not in text and "Resident per file" not in text


def sweep_file(tmp_path: Path, grid: dict, **parameters) -> Path:
    path = tmp_path / "sets.yaml"
    path.write_text(yaml.safe_dump({"notebook": "01_load_sweep", "campaign": "sets-sweep",
                                    "parameters": {"strategies": ["pread"], "caches": ["warm"], "runs": 1,
                                                   "device": "host", **parameters}, "grid": grid}))
    return path


def test_a_sweep_over_a_sharded_directory_runs(space, tmp_path):
    """Relative model paths inside the data root: the directory, its index json and one shard."""
    grid = {"file": ["models/tiny-sharded", "models/tiny-sharded/model.safetensors.index.json",
                     f"models/tiny-sharded/{SHARDS[1]}"]}
    sweep = load_sweep(sweep_file(tmp_path, grid))
    assert sweep.grid["file"][0] == str(space["model"].resolve())
    report = run_sweep(sweep, ledger_path=space["ledger"], out_dir=tmp_path / "runs", progress=False)
    assert report.ok and report.count("done") == 3, [o.error for o in report.outcomes]
    with Ledger(space["ledger"]) as ledger:
        attempts, runs = ledger.attempts("sets-sweep"), ledger.runs(campaign="sets-sweep")
    assert len(attempts) == 3 and runs["error"].isna().all() and runs["verified"].all()
    assert len(set(attempts["file_hash"])) == 1 and attempts["file_hash"].iloc[0].startswith("set:")
    assert all(set(SHARDS) <= set(r) for r in runs["resident_files"])


def test_a_sweeps_model_must_resolve_and_stay_in_the_data_root(space, tmp_path):
    refused = {"models/empty": "no model in it", "models/nothing-here": "no such file"}
    outside = tmp_path / "outside"
    write_synthetic(outside, format="safetensors", layout="dense", size=1 << 20, seed=7, shards=2)
    linked = space["root"] / "models" / "linked"
    linked.mkdir(exist_ok=True)
    for name in os.listdir(outside):  # each shard a link out of the data root, the index json too
        if not (linked / name).exists():
            os.symlink(outside / name, linked / name)
    refused["models/linked"] = "leaves"
    for value, needle in refused.items():
        sweep = load_sweep(sweep_file(tmp_path, {"file": [value]}))
        with pytest.raises(SweepError, match=needle) as err:
            run_sweep(sweep, ledger_path=tmp_path / "l.sqlite", out_dir=tmp_path / "never", progress=False)
        assert "\n" not in str(err.value) and "parameter 'file'" in str(err.value)
        assert not (tmp_path / "never").exists()


def test_the_file_picker_offers_model_directories_not_their_shards(space):
    offered = model_choices(space["root"] / "models")
    assert str(space["model"]) in offered and str(space["root"] / "models" / "one.gguf") in offered
    assert not any(name in o for o in offered for name in SHARDS)
    assert str(space["root"] / "models" / "empty") not in offered


def test_notebook_06s_demo_engine_loads_every_file_of_a_set(space):
    """The default commands of notebook 06 (the demo engine, heap vs mmap) on a model directory and on a
    gguf-split set named by one split: the engine reads every file, the runner sets the state of each."""
    from workbench.cli.notebooks.engines import run_engine_ab

    split = space["root"] / "models" / "moe-split"
    write_synthetic(split, format="gguf", layout="moe", size=2 << 20, seed=8, shards=3)
    for model, files in ((space["model"], 3), (split / "model-00002-of-00003.gguf", 3)):
        results = run_engine_ab([], str(model), caches=["warm"], runs=1, device="host", ledger=space["ledger"],
                                campaign="sets-06")
        assert len(results) == 2 and all(r.stats.n == 1 and not r.stats.n_failed for r in results)
        for r in results:
            (run,) = r.runs
            assert f"in {files} file(s)" in run.report.external.marker_line, run.report.external.marker_line
            assert all(v >= 0.98 for k, v in run.resident_files.items() if not k.endswith(".json"))
            assert len([k for k in run.resident_files if not k.endswith(".json")]) == files
