"""``workbench demo`` end to end on a small size, and the README's quickstart against .ci/run."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.ledger import Ledger

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


@pytest.mark.slow
@pytest.mark.static_figures  # the quickstart's report and notebooks with their images, as a user gets them
@pytest.mark.timeout(900)  # 4 notebooks and the report each start a headless Chromium for the static figures
def test_demo_end_to_end_then_again(tmp_path, private_lock_dir):
    data, ledger = tmp_path / "data", tmp_path / "ledger.sqlite"
    args = ["demo", "--size", "4MiB", "--runs", "2", "--out", str(data), "--ledger", str(ledger)]
    first = CliRunner().invoke(main, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    report = data / "reports" / "demo"
    drawn = bool(defaults.browser_path())  # the static figures need a Chrome/Chromium
    assert {p.name for p in report.iterdir()} == {"attempts.csv", "runs.csv", "report.md", "report.html",
                                                  *(["figures"] if drawn else [])}
    assert f"Report:    {report / 'report.html'}" in first.output
    assert (f"Figures:   {report / 'figures'}/ (PNG + SVG)" if drawn else "static images not drawn") in first.output
    models = sorted(p.name for p in (data / "models").iterdir())
    assert models == ["demo-dense-4MiB.gguf", "demo-moe-4MiB.gguf"]

    attempts = pd.read_csv(report / "attempts.csv")
    assert len(attempts) == 7 * 2 * 2  # every strategy × {dense, moe} × {cold, warm}
    assert set(attempts["strategy"]) == {"pread", "willneed", "warmer", "mmap", "populate", "lanes", "odirect"}
    assert all(("demo-dense-4MiB" in label) != ("demo-moe-4MiB" in label) for label in attempts["label"])
    runs = pd.read_csv(report / "runs.csv")
    assert len(runs) == len(attempts) * 2 and runs["error"].isna().all() and runs["verified"].all()
    md = (report / "report.md").read_text()
    assert md.count("| `") == len(attempts) and "baseline" in md
    page = (report / "report.html").read_text()
    assert 'id="figure-median"' in page and 'id="figure-gbps"' in page and 'id="figure-resident"' in page
    notebooks = list((data / "runs" / "demo").glob("*.ipynb"))
    assert len(notebooks) == 4  # {dense, moe} × {cold, warm}, one papermill execution each
    with Ledger(ledger) as opened:
        assert not opened.ceilings().empty  # the GB/s figure has this machine's walls to draw

    # Twice is safe: models kept, finished points resumed, nothing measured again.
    stamps = {p: p.stat().st_mtime_ns for p in (data / "models").iterdir()}
    second = CliRunner().invoke(main, args, catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert "0 run, 4 resumed" in second.output
    assert {p: p.stat().st_mtime_ns for p in (data / "models").iterdir()} == stamps
    with Ledger(ledger) as opened:
        assert len(opened.attempts("demo")) == len(attempts)


def test_demo_rejects_bad_options_in_one_line(tmp_path):
    for bad in (["--runs", "0"], ["--size", "lots"], ["--shards", "0"], ["--shards", "17"]):
        result = CliRunner().invoke(main, ["demo", *bad, "--out", str(tmp_path / "d")])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()  # nothing written before the options are checked


def test_demo_sweep_ships_in_the_package_and_loads():
    from workbench.cli.demo import demo_sweep_file
    from workbench.cli.sweep.execute import expand_grid, load_sweep

    sweep = load_sweep(demo_sweep_file())
    assert sweep.campaign == "demo" and sweep.notebook.name == "01_load_sweep.ipynb"
    assert demo_sweep_file().read_bytes() == (ROOT / "data" / "sweeps" / "demo.yaml").read_bytes()
    assert len(expand_grid(sweep)) == 4


@pytest.mark.parametrize("path", sorted((ROOT / "data" / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_example_sweeps_parse(path):
    from workbench.cli.sweep.execute import expand_grid, load_sweep

    assert expand_grid(load_sweep(path))


def test_readme_quickstart_is_two_commands_and_the_second_is_ci():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", quickstart, re.S)
    commands = [line for block in blocks for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2, commands
    install_demo, tests = commands
    assert "pip install" in install_demo and install_demo.rstrip().endswith("workbench demo")
    assert tests == "bash .ci/run"  # the README's test command is literally what CI runs
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert steps[-1].startswith(".venv/bin/python -m pytest -q -n ")  # the whole suite, on every core
    assert steps[-2].startswith(".venv/bin/lint-imports")  # the layers contract is checked before the tests
    assert ".venv/bin/python -m pip install -q -e '.[dev]'" in steps
    assert "chromium" in ci and "playwright install" not in ci  # Debian's browser, never a download


def test_ci_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / ".ci" / "run")], check=True)


def test_the_demo_measures_five_runs_per_attempt_by_default(tmp_path):
    from workbench.cli.demo import DemoOptions, demo_sweep

    options = DemoOptions.build(data_dir=str(tmp_path / "d"), device="host")
    sweep = demo_sweep(options, [tmp_path / "a.gguf"])
    assert sweep.parameters["runs"] == 5  # what --runs' help asks for a claim
    assert demo_sweep(DemoOptions.build(runs=2, data_dir=str(tmp_path / "d"), device="host"),
                      [tmp_path / "a.gguf"]).parameters["runs"] == 2


def test_demo_shards_writes_each_model_as_a_split_set_and_keeps_it(tmp_path):
    # `workbench demo --shards 3`: the sweep's points are the sets' directories, each a gguf-split set
    # of 3 files that open_index reads as one model; a second demo keeps them, a broken one is rewritten.
    from workbench.cli.demo import MODELS, DemoOptions, _model, demo_sweep
    from workbench.formats import open_index

    options = DemoOptions.build(size="4MiB", runs=1, data_dir=str(tmp_path / "d"), device="host", shards=3)
    models = [_model(options, layout, fmt) for layout, fmt in MODELS]
    assert [m.name for m in models] == ["demo-dense-4MiB-3shards", "demo-moe-4MiB-3shards"]
    for model in models:
        index = open_index(model)
        assert [Path(f.path).name for f in index.files] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
        assert all(t.file in {f.path for f in index.files} for t in index.tensors)
    stamps = {p: p.stat().st_mtime_ns for m in models for p in m.iterdir()}
    assert [_model(options, layout, fmt) for layout, fmt in MODELS] == models
    assert {p: p.stat().st_mtime_ns for m in models for p in m.iterdir()} == stamps  # kept, not rewritten
    (models[1] / "model-00002-of-00003.gguf").unlink()  # an interrupted write: the set is written again
    assert len(open_index(_model(options, *MODELS[1])).files) == 3
    assert demo_sweep(options, models).grid["file"] == [str(m.resolve()) for m in models]
    one = DemoOptions.build(size="4MiB", data_dir=str(tmp_path / "d"), device="host")
    assert one.shards == 1 and _model(one, *MODELS[0]).name == "demo-dense-4MiB.gguf"
