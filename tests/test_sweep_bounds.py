"""Issue 35 §1: a sweep's work is bounded by what its file can make, not by its length — points counted
and capped before any is made (six axes of 60 values are 4.7 × 10¹⁰ points), the text its aliases
expand to and the bytes its points carry bounded (3,000 aliases of a 1 MiB string), the points made
lazily, and a load sweep's strategy-parameter product counted before its configurations are made."""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from one_line import one_error_line, refused_within_a_second

from workbench.settings import defaults
from workbench.cli import main
from workbench.cli.sweep.execute import expand_grid, load_sweep
from workbench.cli.sweep.grid import MAX_GRID_BYTES, MAX_POINTS, SweepGrid
from workbench.errors import ParamError, SweepError


@pytest.fixture()
def data(tmp_path: Path):
    root = tmp_path / "data"
    (root / "models").mkdir(parents=True)
    with defaults.set_data_root(root):
        yield root


def refused_at_once(path: Path, *needles: str) -> None:
    """SweepError in one line from load_sweep within 1 s of CPU, and the CLI's dry run: exit 2, one line."""
    refused_within_a_second(lambda: load_sweep(path), SweepError, *needles)
    one_error_line(CliRunner().invoke(main, ["sweep", str(path), "--dry-run"]), needles[0])


def test_a_grid_of_more_points_than_the_cap_is_refused_before_any_is_made(tmp_path, data):
    path = tmp_path / "six.yaml"
    axis = json.dumps(list(range(60)))
    path.write_text("notebook: 01_load_sweep\ncampaign: c\ngrid:\n" + "".join(f"  {k}: {axis}\n" for k in "abcdef"))
    refused_at_once(path, "46,656,000,000 points", "60 × 60 × 60 × 60 × 60 × 60", f"{MAX_POINTS:,}")


def test_aliases_of_a_long_string_are_refused_by_the_text_they_expand_to(tmp_path, data):
    path = tmp_path / "alias.yaml"
    items = ["&big " + "x" * (1 << 19)] + ["*big"] * 3000  # 0.5 MiB on disk, 1.5 GB expanded
    path.write_text("notebook: 01_load_sweep\ncampaign: c\ngrid:\n  caches: [" + ", ".join(items) + "]\n")
    refused_at_once(path, "MiB of text once its YAML aliases are expanded")


def test_the_bytes_a_grid_repeats_over_its_points_are_bounded(tmp_path, data):
    # 0.8 MB of distinct text (under the file's bounds), each value carried by 100 points: 80 MB
    path = tmp_path / "wide.yaml"
    values = json.dumps([f"{i:03d}" + "y" * 8_000 for i in range(100)])
    path.write_text(f"notebook: 01_load_sweep\ncampaign: c\ngrid:\n  caches: {values}\n  runs: {list(range(100))}\n")
    refused_at_once(path, "MiB of parameters", f"{MAX_GRID_BYTES // 2**20} MiB")


def test_a_sweep_file_larger_than_any_sweep_needs_is_refused_before_it_is_parsed(tmp_path, data):
    path = tmp_path / "big.yaml"
    path.write_text("notebook: 01_load_sweep\ncampaign: c\ndescription: " + "z" * (2 << 20) + "\n")
    refused_at_once(path, "larger than the 1 MiB a sweep file may be")


def test_a_fifo_named_as_the_sweep_file_is_one_line_not_a_wait(tmp_path, data):
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    refused_at_once(tmp_path / "fifo.yaml", "cannot read the sweep file", "FIFO")


def test_the_grid_is_counted_without_expanding_and_made_in_product_order(tmp_path, data):
    path = tmp_path / "ok.yaml"
    path.write_text("notebook: 01_load_sweep\ncampaign: c\nparameters: {runs: 5}\n"
                    "grid:\n  caches: [[cold], [warm], [cold, warm]]\n  strategies: [[pread], [mmap], [warmer]]\n")
    sweep = load_sweep(path)
    points = expand_grid(sweep)
    assert isinstance(points, SweepGrid) and len(points) == 9
    product = list(itertools.product(sweep.grid["caches"], sweep.grid["strategies"]))
    assert [(p.grid_values["caches"], p.grid_values["strategies"]) for p in points] == product
    assert [p.index for p in points] == list(range(9)) and points[-1].name == points[8].name
    assert all(p.params["runs"] == 5 for p in points)
    assert len({p.name for p in points}) == 9


def test_a_grid_at_the_cap_is_counted_in_constant_time(tmp_path, data):
    path = tmp_path / "cap.yaml"
    path.write_text(f"notebook: 01_load_sweep\ncampaign: c\ngrid:\n  runs: {list(range(100))}\n"
                    f"  caches: {json.dumps([[str(i)] for i in range(MAX_POINTS // 100)])}\n")
    sweep = load_sweep(path)
    start = time.process_time()
    points = expand_grid(sweep)
    assert len(points) == MAX_POINTS and points[MAX_POINTS - 1].grid_values == {"runs": 99, "caches": ["99"]}
    assert time.process_time() - start < 0.5  # no point but the one asked for is made


def test_a_load_sweeps_parameter_product_is_counted_before_its_configurations_are_made():
    from workbench.cli.notebooks.actions import MAX_CONFIGS, expand_configs

    params = {"warmer": {"threads": list(range(1, 61)), "chunk_mib": list(range(1, 61))}}
    start = time.process_time()
    with pytest.raises(ParamError, match="3,600\\+ configurations"):
        expand_configs("m.gguf", ["warmer"], params, "host")
    assert time.process_time() - start < 0.5
    assert len(expand_configs("m.gguf", ["warmer"], {"warmer": {"threads": [1, 2], "chunk_mib": [1, 4]}}, "host")) == 4
    assert MAX_CONFIGS < 3_600


def test_a_points_plan_counts_its_configurations_without_making_them(tmp_path, data):
    from workbench.cli.sweep.execute import SweepPoint
    from workbench.cli.sweep.plan import plan_point

    from workbench.formats.synth import write_synthetic

    model = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="dense", size=1 << 20).path
    params = {"file": str(model), "strategies": ["warmer", "pread"], "caches": ["cold", "warm"], "runs": 5,
              "params": {"warmer": {"threads": list(range(1, 41)), "chunk_mib": list(range(1, 25))}}}
    start = time.process_time()
    plan = plan_point(SweepPoint(0, params, {}, "p"), {})
    assert time.process_time() - start < 0.2  # 961 RunConfigs made and labelled took ~1 s (a dry run: per point)
    assert plan.configs == 2 * 961 and plan.total_runs == 5 * 2 * 961
