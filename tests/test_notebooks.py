"""The notebooks under papermill, their shared panel, the figures and the report."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest

from workbench.settings import defaults
from workbench.errors import LedgerError, ParamError, UnknownName, WorkbenchError
from workbench.ledger import Ledger
from workbench.cli.notebooks.actions import ParamGrid, ensure_model, expand_configs
from workbench.cli.notebooks.ui import Panel, in_batch, ledger_path, parse_list

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
MiB = 1 << 20


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nb")
    model = ensure_model(root / "tiny.gguf", layout="dense", format="gguf", size=2 * MiB)
    return {"root": root, "model": model, "ledger": root / "ledger.sqlite"}


@pytest.fixture(scope="module")
def sweep01(space: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The load-sweep notebook executed once for the module into its ledger (campaign nb-01): its own
    test checks the notebook, and the report and figure tests read the campaign — whichever runs first,
    alone or on any worker. It draws its static figures (as a ``static_figures`` test would) because
    its own test checks them."""
    out = tmp_path_factory.mktemp("nb01") / "01.ipynb"
    with pytest.MonkeyPatch.context() as patch:
        if os.environ.get(defaults.BROWSER) == "none":  # the suite's "no static images" (conftest.py)
            patch.delenv(defaults.BROWSER)
        nb = execute("01_load_sweep.ipynb", out, file=str(space["model"]), strategies=["pread", "warmer"],
                     params={"warmer": {"threads": [1, 2], "chunk_mib": 1}}, caches=["cold", "warm"], runs=2,
                     campaign="nb-01", ledger_path=str(space["ledger"]))
    return nb, out


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Other suites on a shared machine hold the host device lock; these tests time nothing.
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def figures_dir() -> tuple[str, ...]:
    """The report's static PNG + SVG folder, where a browser draws them (tests marked static_figures)."""
    return ("figures",) if defaults.browser_path() else ()


def execute(name: str, out: Path, **parameters) -> dict:
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters, kernel_name="python3",
                               progress_bar=False, extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return json.loads(out.read_text())


def outputs(nb: dict) -> list[dict]:
    return [o for c in nb["cells"] for o in c.get("outputs", [])]


def html_outputs(nb: dict) -> str:
    return "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs(nb))


def plotly_figure(nb: dict, title_start: str) -> dict:
    return next(o["data"]["application/vnd.plotly.v1+json"] for o in outputs(nb)
                if o.get("data", {}).get("application/vnd.plotly.v1+json", {}).get("layout", {}).get("title", {})
                .get("text", "").startswith(title_start))


def plotly_titles(nb: dict) -> list[str]:
    figs = [o["data"]["application/vnd.plotly.v1+json"] for o in outputs(nb)
            if "application/vnd.plotly.v1+json" in o.get("data", {})]
    return [f["layout"]["title"]["text"] for f in figs]


@pytest.mark.parametrize("name", ["01_load_sweep.ipynb", "02_h2d_microbench.ipynb", "03_expert_slices.ipynb",
                                  "04_long_session.ipynb", "05_ledger_report.ipynb", "06_engine_ab.ipynb",
                                  "07_traces.ipynb", "08_ranks.ipynb"])
def test_notebook_has_one_parameters_cell_and_a_known_kernel(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert {"ledger_path", "campaign", "autorun"} <= set(papermill.inspect_notebook(str(NOTEBOOKS / name)))
    assert nb.metadata.kernelspec.name == "python3"
    # The package ships the same notebooks (links in a checkout, copies in a wheel): check the
    # package's own copy, not notebooks_dir(), which in a checkout is notebooks/ itself.
    shipped = Path(__file__).resolve().parent.parent / "workbench" / "cli" / "notebooks" / name
    assert shipped.read_bytes() == (NOTEBOOKS / name).read_bytes()


@pytest.mark.static_figures
def test_load_sweep_notebook_records_attempts_and_draws(space, sweep01):
    nb, path = sweep01
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-01")
        runs = ledger.runs(campaign="nb-01")
    assert len(attempts) == 6  # (pread + warmer × 2 threads) × (cold, warm)
    assert sorted(attempts["cache"]) == ["cold"] * 3 + ["warm"] * 3
    assert list(attempts["verdict"]).count("baseline") == 2
    assert len(runs) == 12 and runs["error"].isna().all()
    assert set(attempts["label"]) >= {"pread · tiny", "warmer chunk_mib=1 threads=2 · tiny"}
    page = html_outputs(nb)
    assert 'class="wb-results"' in page and "warmer chunk_mib=1 threads=1 · tiny" in page
    assert "vs baseline [95 % CI]" in page
    titles = plotly_titles(nb)
    assert any(t.startswith("Load time per attempt") for t in titles)
    assert any(t.startswith("Resident before each run") for t in titles)
    assert any(t.startswith("Median GB/s by threads × chunk") for t in titles)
    assert_static_figures_in_html(nb, path, len(titles))


def assert_static_figures_in_html(nb: dict, path: Path, n_figures: int) -> None:
    """Every figure of the executed notebook is also a PNG and an SVG beside its plotly JSON, and
    ``jupyter nbconvert --to html`` shows them (it shows no plotly JSON)."""
    import subprocess
    import sys

    from workbench.settings import defaults

    if not defaults.browser_path():
        pytest.skip("no Chrome/Chromium to draw static figures (apt-get install chromium)")
    figures = [o["data"] for o in outputs(nb) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == n_figures > 0
    assert all("".join(f.get("image/png", "")).startswith("iVBORw0KGgo")  # base64 of the PNG signature
               and "".join(f.get("image/svg+xml", "")).startswith("<svg") for f in figures)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(path), "--output",
                    "page.html"], check=True, capture_output=True)
    page = (path.parent / "page.html").read_text()
    assert page.count('src="data:image/svg+xml;base64,') >= n_figures


def test_h2d_notebook_records_each_path_and_size(space, tmp_path):
    nb = execute("02_h2d_microbench.ipynb", tmp_path / "02.ipynb", device="host", sizes_mib=[1, 2],
                 repeats=2, campaign="nb-02", ledger_path=str(space["ledger"]))
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-02")
        runs = ledger.runs(campaign="nb-02")
    assert len(attempts) == 12  # 6 paths × 2 sizes
    assert set(attempts["strategy"]) == {f"h2d:{p}" for p in ("heap", "mmap_warm_pte", "mmap_cold_pte",
                                                                 "pread_copy", "pinned_staging", "registered")}
    heap = attempts[attempts["strategy"] == "h2d:heap"]
    assert list(heap["verdict"]) == ["baseline", "baseline"]
    done = runs[runs["error"].isna()]
    assert (done["verified"] == True).all()  # noqa: E712 - every copied byte read back equal
    assert any(t.startswith("Host→device copy paths") for t in plotly_titles(nb))


def test_report_notebook_writes_exports(space, sweep01, tmp_path):
    out = tmp_path / "report"
    nb = execute("05_ledger_report.ipynb", tmp_path / "05.ipynb", campaign="nb-01",
                 ledger_path=str(space["ledger"]), out_dir=str(out))
    assert {p.name for p in out.iterdir()} == {"attempts.csv", "runs.csv", "report.md", "report.html", *figures_dir()}
    assert len(pd.read_csv(out / "attempts.csv")) == 6
    assert "Attempt history" in (out / "report.md").read_text()
    assert str(out / "report.html") in html_outputs(nb)
    assert any(t.startswith("GB/s against") for t in plotly_titles(nb))


ENGINES = Path(__file__).resolve().parent / "engines"


def test_engine_ab_notebook_compares_two_engines_with_their_phases(space, tmp_path):
    import sys

    from workbench.formats.synth import write_synthetic

    model = write_synthetic(tmp_path / "m.safetensors", format="safetensors", layout="dense", size=2 * MiB).path
    commands = [f"{{python}} {ENGINES / 'safetensors_engine.py'} {{file}}",
                f"{sys.executable} {ENGINES / 'numpy_engine.py'} {model} --stall-ms 4000"]
    out = tmp_path / "exports"
    nb = execute("06_engine_ab.ipynb", tmp_path / "06.ipynb", commands=commands, labels=["st", "np"],
                 marker="model ready", start_marker="phase imports", file=str(model), runs=3,
                 campaign="nb-06", ledger_path=str(space["ledger"]), out_dir=str(out))
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-06")
        runs = ledger.runs(campaign="nb-06")
    assert list(attempts["label"]) == ["st", "np"] and set(attempts["kind"]) == {"external"}
    assert list(attempts["verdict"]) == ["baseline", "slower"] and attempts["ci_high"].iloc[1] < 1, \
        list(attempts["notes"])
    assert attempts["binary_hash"].str.startswith("xxh3_128:").all() and attempts["binary_hash"].nunique() == 2
    assert sorted(runs["position"]) == list(range(6)) and runs["error"].isna().all()
    page = html_outputs(nb)
    verdict = re.search(r'<div class="wb-verdict"><ul><li>(.*?)</li>', page).group(1)
    # 3 runs a side: the verdict carries its caveat in the notebook too
    assert re.fullmatch(r"np vs st \(warm\): 0\.\d\d× \[0\.\d\d–0\.\d\d\] — slower \(n=3 &lt; 5: not a claim\) "
                        r"\(interval excludes 1.*\)", verdict)
    assert 'class="wb-phases"' in page and "stall" in page and "numpy_engine.py@" in page
    titles = plotly_titles(nb)
    assert any(t.startswith("Where the load window goes") for t in titles)
    assert any(t.startswith("Load time per attempt") for t in titles)
    bars = plotly_figure(nb, "Where the load")
    assert [t["name"] for t in bars["data"]][-1] == "unattributed" and "stall" in {t["name"] for t in bars["data"]}
    assert {p.name for p in out.iterdir()} == {"attempts.csv", "runs.csv", "report.md", "report.html", *figures_dir()}
    assert "| binary |" in (out / "report.md").read_text()


def test_engine_ab_notebook_defaults_run_the_demo_engine(space, tmp_path):
    nb = execute("06_engine_ab.ipynb", tmp_path / "06.ipynb", file=str(space["model"]), runs=2,
                 campaign="nb-06-demo", ledger_path=str(space["ledger"]), out_dir=str(tmp_path / "x"))
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-06-demo")
        runs = ledger.runs(campaign="nb-06-demo")
    assert list(attempts["label"]) == ["--read heap", "--read mmap"]
    assert attempts["binary_path"].str.endswith("demo_engine.py").all()
    assert runs["error"].isna().all() and all({"index", "weights"} <= set(p) for p in runs["phases"])
    assert "--read mmap vs --read heap (warm)" in html_outputs(nb)
    bars = plotly_figure(nb, "Where the load")
    # Stacked in the order the engine printed them, its "index" too (a strategy phase's name).
    assert [t["name"] for t in bars["data"]] == ["imports", "index", "weights", "checksum", "unattributed"]


def test_engine_ab_refuses_mismatched_lists(space):
    from workbench.cli.notebooks.engines import expand_command, run_engine_ab

    with pytest.raises(WorkbenchError, match="1 labels for 2 commands"):
        run_engine_ab(["true", "true"], str(space["model"]), labels=["a"])
    assert expand_command("{python} -c 'x = {1: 2}' {file}", "/m b.gguf").endswith("-c 'x = {1: 2}' '/m b.gguf'")


def test_expert_slices_notebook_measures_both_alignments_and_says_which_engaged(space, tmp_path):
    files = {a: ensure_model(space["root"] / f"moe-a{a}.gguf", layout="moe", format="gguf", size=3 * MiB,
                             alignment=a, experts=8) for a in (64, 32)}
    nb = execute("03_expert_slices.ipynb", tmp_path / "03.ipynb", file_64=str(files[64]), file_32=str(files[32]),
                 caches=["warm"], runs=2, campaign="nb-03", ledger_path=str(space["ledger"]), session_rounds=1,
                 session_turns=3, session_tokens=2, lanes=2, compute="sleep:1")
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-03")
        runs = ledger.runs(campaign="nb-03")
    sessions = attempts[attempts["kind"] == "session"]
    assert [label.split(" · ")[0] for label in sessions["label"]] == ["placement=bounce", "placement=inplace"]
    attempts = attempts[attempts["kind"] != "session"]
    assert len(attempts) == 8 and (runs["verified"] == True).all()  # noqa: E712 - 4 methods x 2 models
    assert list(attempts["verdict"]).count("baseline") == 2  # per-expert pread, once per model
    page = html_outputs(nb)
    assert 'class="wb-placement"' in page and "experts: one copy per blob · a64" in page
    assert "Alignment 64: odirect-zero-copy ON" in page and "Alignment 32: odirect-zero-copy INERT" in page
    assert "would under-align tensors" in page
    titles = plotly_titles(nb)
    assert any(t.startswith("Median load time: per-expert vs blob") for t in titles)
    assert any(t.startswith("Shift-copy MiB per load") for t in titles)
    assert 'class="wb-ab"' in page and "every cell read the same bytes per token" in page
    assert any(t.startswith("Session A/B: shift MiB/token per cell") for t in titles)


def test_long_session_notebook_sets_single_shot_beside_long(space, tmp_path):
    # one token of the single short turn never fills the cache, as the write-up's short runs never did
    model = ensure_model(space["root"] / "moe-a64-e64.gguf", layout="moe", format="gguf", size=16 * MiB,
                         alignment=64, experts=64)
    nb = execute("04_long_session.ipynb", tmp_path / "04.ipynb", file=str(model), turns=4, tokens=4, short_tokens=1,
                 cache_mib=0.5, experts_per_token=2, campaign="nb-04", ledger_path=str(space["ledger"]), rounds=1,
                 lanes=2, compute="sleep:1")
    with Ledger(space["ledger"]) as ledger:
        attempts = ledger.attempts("nb-04")
        turns = ledger.turns(campaign="nb-04")
    assert list(attempts["kind"]) == ["session"] * 6 and len(turns) == 1 + 1 + 4 + 4 + 4 + 4
    ab = attempts.iloc[4:]
    assert [label.split(" · ")[0] for label in ab["label"]] == ["boundary-release=off", "boundary-release=on"]
    assert ab["verdict"].iloc[1] in ("faster", "slower", "inconclusive")
    attempts, turns = attempts.iloc[:4], turns[turns["attempt_id"].isin(attempts["id"].iloc[:4])]
    ends = {label.split(" · ")[0]: turns[turns["attempt_id"] == i]["unreleased_pages"].iloc[-1]
            for i, label in zip(attempts["id"], attempts["label"])}
    assert ends["single-shot release=off"] == ends["single-shot release=on"] == 0
    assert ends["long release=off"] > 0 == ends["long release=on"]
    assert 'class="wb-sessions"' in html_outputs(nb)
    titles = plotly_titles(nb)
    assert any(t.startswith("Unreleased pages at the end") for t in titles)
    assert any(t.startswith("Unreleased pages per turn") for t in titles)
    assert any(t.startswith("Session A/B: unreleased pages per cell") for t in titles)
    assert any(t.startswith("Where a token's time went") for t in titles)


def test_failing_notebook_fails_papermill_with_the_one_line_error(space, tmp_path):
    out = tmp_path / "bad.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        execute("01_load_sweep.ipynb", out, file=str(tmp_path / "missing.gguf"),
                strategies=["pread"], caches=["cold"], runs=1, campaign="nb-bad", ledger_path=str(space["ledger"]))
    line = f"workbench: error: {tmp_path / 'missing.gguf'}: no such model file"
    assert "missing.gguf: no such model file" in err.value.evalue
    assert err.value.traceback == [line]  # the CLI's one line, not a 77-line traceback
    cells = json.loads(out.read_text())["cells"]
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    failed = next(i for i, c in enumerate(cells) if any(o["output_type"] == "error" for o in c.get("outputs", [])))
    # at the top: papermill's banner, the title, the parameters (as given and as injected), then the line
    assert failed == code[2] and failed <= 5
    assert [o["traceback"] for o in cells[failed]["outputs"] if o["output_type"] == "error"] == [[line]]


def test_report_notebook_on_a_missing_ledger_fails_in_one_line_and_creates_none(tmp_path):
    typo = tmp_path / "typo.sqlite"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        execute("05_ledger_report.ipynb", tmp_path / "05.ipynb", campaign="demo", ledger_path=str(typo))
    assert err.value.traceback == [f"workbench: error: {typo}: no ledger here; check --ledger or "
                                   "$WORKBENCH_LEDGER (only commands that record create a ledger)"]
    assert not typo.exists()


def test_attempts_table_shows_the_interval_and_an_unmeasured_spread(tmp_path):
    from ledger_helpers import record_attempt
    from workbench.cli.notebooks.actions import attempts_table

    with Ledger(tmp_path / "l.sqlite") as led:
        base = record_attempt(led, "pread", [0.5, 0.52, 0.51, 0.5, 0.53, 0.5])
        record_attempt(led, "mmap", [0.25, 0.26, 0.25, 0.25, 0.27, 0.25], baseline=base)
        record_attempt(led, "lanes", [0.3])
        table = attempts_table(led.attempts())
    assert table["vs baseline [95 % CI]"][0] == "baseline"
    assert re.fullmatch(r"2\.0\d× \[\d\.\d\d–\d\.\d\d\]", table["vs baseline [95 % CI]"][1])
    assert table["spread"][2] == "— ⚠" and table["spread"][0].endswith(" %")


# -- the panel and its helpers, without a kernel ------------------------------------------------------


def test_batch_detection_and_overrides(monkeypatch):
    assert in_batch(True) and not in_batch(False)
    monkeypatch.setenv("WORKBENCH_BATCH", "1")
    assert in_batch(None)
    monkeypatch.delenv("WORKBENCH_BATCH")
    assert in_batch(None)  # no kernel at all (a script): nothing to wait for


def test_ledger_path_resolution(monkeypatch, tmp_path):
    assert ledger_path(str(tmp_path / "x.sqlite")) == tmp_path / "x.sqlite"
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "env.sqlite"))
    assert ledger_path("") == tmp_path / "env.sqlite"
    monkeypatch.delenv("WORKBENCH_LEDGER")
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "d"))
    assert ledger_path(None) == tmp_path / "d" / "ledger.sqlite"


def test_parse_list_reads_each_item_as_yaml():
    assert parse_list("2, 4,16") == [2, 4, 16]
    assert parse_list("true, 0.5, abc") == [True, 0.5, "abc"]
    assert parse_list("  ") == []


def test_expand_configs_crosses_each_strategys_grid(space):
    configs = expand_configs(space["model"], ["pread", "warmer"],
                             {"warmer": {"threads": [1, 2], "chunk_mib": [4, 16]}, "pread": {"evict": True}}, "host")
    assert [(c.strategy, dict(c.params)) for c in configs] == [
        ("pread", {"evict": True}),
        ("warmer", {"threads": 1, "chunk_mib": 4}), ("warmer", {"threads": 1, "chunk_mib": 16}),
        ("warmer", {"threads": 2, "chunk_mib": 4}), ("warmer", {"threads": 2, "chunk_mib": 16})]
    assert configs[0].label == "pread evict=True · tiny"
    with pytest.raises(ParamError, match="'thread'"):
        expand_configs(space["model"], ["warmer"], {"warmer": {"thread": [1]}}, "host")
    with pytest.raises(UnknownName):
        expand_configs(space["model"], ["nosuch"], {}, "host")


def test_param_grid_follows_the_strategy_selection():
    import ipywidgets as w

    pick = w.SelectMultiple(options=["pread", "warmer", "lanes"], value=("pread", "warmer"))
    grid = ParamGrid(pick, {"warmer": {"threads": [2, 4]}})
    names = [t.description for t in grid.box.children]
    assert "warmer.threads" in names and "warmer.chunk_mib" in names and "pread.evict" in names
    assert grid.value == {"warmer": {"threads": [2, 4]}}
    chunk = next(t for t in grid.box.children if t.description == "warmer.chunk_mib")
    chunk.value = "4, 16"
    assert grid.value == {"warmer": {"threads": [2, 4], "chunk_mib": [4, 16]}}
    pick.value = ("pread", "lanes")  # warmer deselected: its values no longer count
    assert grid.value == {} and any(t.description == "lanes.threads" for t in grid.box.children)


def test_panel_button_runs_the_action_with_the_controls_values():
    import ipywidgets as w

    seen = []

    def action(values, say):
        say("working")
        seen.append(dict(values))
        if values["n"] == 0:
            from workbench.errors import WorkbenchError
            raise WorkbenchError("n must not be 0")
        return ["result"]

    n = w.IntText(value=3)
    panel = Panel("t", {"n": n}, action)
    panel.button.click()
    assert seen == [{"n": 3}] and panel.runs == 1 and "run 1 finished" in panel.status.value
    n.value = 0
    panel.button.click()
    assert "run 2 failed: n must not be 0" in panel.status.value and not panel.button.disabled


# -- figures and report from a real ledger -------------------------------------------------------------


def test_figures_show_ranges_walls_and_missed_cache_states(space, sweep01):
    from workbench.ledger.figures.campaign import campaign_figures, gbps_vs_ceilings, median_with_range, resident_before

    with Ledger(space["ledger"]) as ledger:
        attempts, runs = ledger.attempts("nb-01"), ledger.runs(campaign="nb-01")
    fig = median_with_range(attempts)
    cold = next(t for t in fig.data if t.name == "cold")
    first = attempts[attempts["cache"] == "cold"].iloc[0]
    assert cold.y[0] == pytest.approx(first["median_s"] * 1000)
    assert cold.error_y.array[0] == pytest.approx((first["max_s"] - first["median_s"]) * 1000)
    walls = pd.DataFrame({"host": ["h", "h", "h"], "name": ["page_cache_read_1t", "page_cache_read_2t", "memcpy"],
                          "gbps": [5.0, 9.0, 20.0]})
    lines = [s for s in gbps_vs_ceilings(attempts, walls).layout.shapes]
    assert sorted(s.y0 for s in lines) == [9.0, 20.0]  # the best page-cache read and memcpy
    # A run labelled cold that started resident gets a red cross.
    faked = runs.copy()
    faked.loc[faked.index[0], ["resident_before", "cache_reached"]] = [1.0, False]
    crosses = [t for t in resident_before(attempts, faked).data if t.name == "state NOT reached"]
    assert len(crosses) == 1 and list(crosses[0].y) == [1.0]
    assert set(campaign_figures(attempts, runs)) == {"median", "gbps", "phases", "resident", "threads_chunk"}
    assert "threads_chunk" not in campaign_figures(attempts[attempts["strategy"] == "pread"], runs)



def test_heat_map_axes_come_from_the_strategies_params():
    """The figures name no strategy: each declares its grid on its Params (``heatmap_axes``)."""
    from workbench.ledger.figures.campaign import threads_chunk_heatmap
    from workbench.strategies import heatmap_axes

    assert heatmap_axes() == {"warmer": ("threads", "chunk_mib"), "lanes": ("threads", "chunk_mib"),
                              "ring": ("threads", "slot_mib")}
    attempts = pd.DataFrame({"id": ["a", "b", "c"], "strategy": ["odirect"] * 3, "cache": ["warm"] * 3,
                             "gbps": [1.0, 2.0, 3.0], "params": [{"threads": 1, "bounce_mib": 4},
                                                                  {"threads": 2, "bounce_mib": 4},
                                                                  {"threads": 2, "bounce_mib": 8}]})
    assert threads_chunk_heatmap(attempts) is None  # odirect declares no grid
    fig = threads_chunk_heatmap(attempts, axes={"odirect": ("threads", "bounce_mib")})
    assert fig.layout.title.text == "Median GB/s by threads × bounce (MiB)"
    assert fig.layout.xaxis.title.text == "bounce (MiB)" and list(fig.data[0].y) == ["1", "2"]


def test_report_writes_offline_html_and_history(space, sweep01, tmp_path):
    from workbench.ledger.report import write_report

    with Ledger(space["ledger"]) as ledger:
        paths = write_report(ledger, "nb-01", tmp_path / "r")
        with pytest.raises(LedgerError, match="no campaign 'nope'"):
            write_report(ledger, "nope", tmp_path / "x")
    page = paths.html.read_text()
    assert page.count("plotly.js v") == 1  # inline once: opens offline, no CDN
    assert not re.search(r'<script[^>]*\ssrc="https?:', page)
    assert all(f'id="figure-{key}"' in page for key in paths.figures)
    assert '<table id="attempts">' in page and "<b>Campaign</b>" in page
    md = paths.markdown.read_text()
    assert md.count("\n1. ") == 1 and "## Attempt history" in md and "| attempt | change |" in md


def test_key_ceilings_of_a_campaign_from_two_hosts_keep_each_hosts_walls():
    # Found in review: with "host:" prefixes, cold read, page cache and memcpy walls vanished.
    import pandas as pd

    from workbench.ledger.figures.campaign import key_ceilings

    frame = pd.DataFrame({"name": ["a:cold_read_buffered_1t", "b:cold_read_buffered_1t", "b:cold_read_direct_2t",
                                   "a:page_cache_read_2t", "a:memcpy", "b:h2d_cuda_pinned", "b:h2d_cuda_registered"],
                          "gbps": [1.0, 2.0, 3.0, 9.0, 4.0, 5.0, 6.0]})
    assert key_ceilings(frame) == {"a:cold_read_buffered_1t": 1.0, "b:cold_read_direct_2t": 3.0,
                                   "a:page_cache_read_2t": 9.0, "a:memcpy": 4.0, "b:h2d_cuda_pinned": 5.0}
