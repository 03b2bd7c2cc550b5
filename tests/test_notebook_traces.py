"""Notebook 07 (routing traces, issue 34 §6): under papermill, its actions without a kernel, and its sweep."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import papermill
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import TraceError
from workbench.ledger import Ledger

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "07_traces.ipynb"
MiB = 1 << 20
SMALL = {"synthetic_tokens": 50, "turns": 3, "tokens": 40, "cache_experts": [2, 4, 8]}  # 120 tokens: the trace repeats


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def execute(out: Path, **parameters) -> dict:
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters=parameters, kernel_name="python3",
                               progress_bar=False, extra_arguments=["--IPKernelApp.log_level=ERROR"])
    return json.loads(out.read_text())


def outputs(nb: dict) -> list[dict]:
    return [o for c in nb["cells"] for o in c.get("outputs", [])]


def html(nb: dict) -> str:
    return "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs(nb))


def figures(nb: dict) -> dict[str, dict]:
    figs = [o["data"]["application/vnd.plotly.v1+json"] for o in outputs(nb)
            if "application/vnd.plotly.v1+json" in o.get("data", {})]
    return {f["layout"]["title"]["text"]: f for f in figs}


def test_the_notebook_is_parameterized_shipped_and_declares_its_paths():
    from workbench.cli.sweep.params import path_parameters

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert len([c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]) == 1
    names = papermill.inspect_notebook(str(NOTEBOOK))
    assert {"trace", "file", "ledger_path", "campaign", "autorun"} <= set(names)
    assert nb.metadata.kernelspec.name == "python3"
    shipped = ROOT / "workbench" / "cli" / "notebooks" / NOTEBOOK.name
    assert shipped.read_bytes() == NOTEBOOK.read_bytes()
    assert path_parameters(NOTEBOOK, names) == {"trace": "file", "file": "model", "ledger_path": "ledger"}


def test_by_default_it_writes_a_trace_shows_it_simulates_and_replays_into_the_ledger(tmp_path):
    store = tmp_path / "ledger.sqlite"
    nb = execute(tmp_path / "07.ipynb", campaign="nb-07", ledger_path=str(store), **SMALL)
    with Ledger(store) as ledger:
        attempts = ledger.attempts("nb-07")
        turns = ledger.turns(campaign="nb-07")
    assert list(attempts["kind"]) == ["session"] and len(turns) == 3
    measured = turns["hits"].sum() / (turns["hits"] + turns["misses"]).sum()
    page = html(nb)
    for css in ("wb-trace-notes", "wb-trace-stats", "wb-trace-sim", "wb-caveats", "wb-replay", "wb-session"):
        assert f'class="{css}"' in page, css
    assert "written by a seeded sticky generator" in page and "agree within 1 point" in page
    assert "Belady&#x27;s MIN (every miss kept) does not bound it" in page  # trace simulate's caveat
    assert "hit rate" in page and "(lru per layer (4 experts), cache" in page  # session's summary line
    # the hypothesis keeps the simulator's prediction; the session measured exactly that
    assert attempts["hypothesis"].iloc[0].startswith("lru with 4 experts a layer hits ")
    predicted = float(attempts["hypothesis"].iloc[0].split(" hits ")[1].split("%")[0]) / 100
    assert measured == pytest.approx(predicted, abs=1e-4)
    titles = figures(nb)
    for start in ("Expert popularity per layer", "Overlap with the previous token", "Reuse distance",
                  "Working set", "Hit rate vs cache size per policy"):
        assert any(t.startswith(start) for t in titles), start
    hit = next(f for t, f in titles.items() if t.startswith("Hit rate vs cache size"))
    names = [d["name"] for d in hit["data"]]
    assert "Belady's MIN (bound)" in names and {"lru", "fifo", "lfu", "arc", "static"} <= set(names)
    marker = next(d for d in hit["data"] if d["name"].startswith("measured"))
    assert marker["x"] == [4] and marker["y"][0] == pytest.approx(measured, abs=1e-4)
    ring = next(d for d in hit["data"] if d["name"].startswith("simulated"))
    assert ring["y"][0] == pytest.approx(predicted, abs=1e-4)


def test_hostile_trace_names_and_policies_reach_the_page_escaped(tmp_path):
    from workbench.cli.notebooks.trace_figures import hit_rate_figure
    from workbench.cli.notebooks.traces_panel import trace_outputs
    from workbench.expert.routing import save_trace, synthetic_trace

    path = tmp_path / "<img src=x onerror=alert(1)>.csv"
    save_trace(synthetic_trace(40, (0, 1, 2, 3), 16, 2, seed=1), path)
    v = {"trace": str(path), "file": "", "size": "8MiB", "experts": 16, "k": 2, "synthetic_tokens": 50, "seed": 0,
         "skew": 1.0, "stickiness": 0.35, "cache_experts": [2, 4], "policies": ["lru"], "replay_experts": 0}
    items = trace_outputs(v, tmp_path / "ledger.sqlite", lambda _m: None)
    page = "".join(i.data for i in items if isinstance(getattr(i, "data", None), str))
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    doc = {"results": [{"policy": "<b>x</b>", "cache_experts": 2, "hit_rate": 0.5, "of_belady": 1.0}],
           "tokens": 1, "k": 1, "n_experts": 2}
    names = [d.name for d in hit_rate_figure(doc, [{"policy": "<b>x</b>", "cache_experts": 2, "hit_rate": 0.5,
                                                    "simulated": 0.5}]).data]
    assert all("<b>" not in n for n in names)


def test_a_bad_trace_is_the_one_line_error_and_records_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("token,layer,expert\n0,0,oops\n")
    store = tmp_path / "ledger.sqlite"
    with pytest.raises(papermill.PapermillExecutionError) as err:
        execute(tmp_path / "bad.ipynb", trace=str(bad), campaign="nb-07-bad", ledger_path=str(store))
    assert len(err.value.traceback) == 1 and str(bad) in err.value.traceback[0]
    assert err.value.traceback[0].startswith("workbench: error: ")
    assert not store.exists()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from workbench.cli.notebooks.actions import ensure_model

    return ensure_model(tmp_path_factory.mktemp("m") / "moe.gguf", layout="moe", format="gguf", size=8 * MiB,
                        alignment=64, experts=16)


def test_the_synthetic_trace_is_seeded_and_has_the_models_shape(model):
    from workbench.cli.notebooks.traces import synthetic_trace_file
    from workbench.expert.routing import load_trace, moe_shape
    from workbench.expert.traces import read_trace, trace_stats
    from workbench.formats import open_index

    kw = dict(tokens=400, k=2, skew=1.2, stickiness=0.5)
    a = synthetic_trace_file(model, seed=1, **kw).read_bytes()
    b = synthetic_trace_file(model, seed=1, **kw)
    assert a == b.read_bytes() and a != synthetic_trace_file(model, seed=2, **kw).read_bytes()
    layers, n = moe_shape(open_index(model).blobs)
    trace = load_trace(b, layers=layers, n_experts=n)
    assert (trace.tokens, trace.layers, trace.k) == (400, layers, 2)
    pooled = trace_stats(read_trace(b)).summary.set_index("layer").loc["all"]
    assert pooled["overlap"] > 0.5 > pooled["overlap_uniform"]  # sticky: tokens share experts


def _replay(model, trace, policy, n, prefetch="route", **kw):
    from workbench.cli.notebooks.traces import (predicted, replay_config, replay_frame, replay_session,
                                                trace_inputs)

    inputs = trace_inputs(trace, str(model), size="8MiB", experts=16, k=2, tokens=50, seed=0, skew=1.0,
                          stickiness=0.35)
    config = replay_config(inputs, turns=2, tokens=30, cache_experts=n, policy=policy, prefetch=prefetch,
                           lanes=1, compute="none", seed=0, **{"overlap": False, **kw})
    result, _warnings = replay_session(Path(inputs.model), config, device="host",
                                       store=Path(str(model) + ".ledger.sqlite"), campaign="t", hypothesis="")
    return replay_frame(predicted(inputs.model, config), result, config).iloc[0]


@pytest.mark.parametrize("policy", ["lru", "arc", "static", "belady"])
def test_a_replay_shorter_trace_than_session_measures_what_is_simulated(model, policy):
    row = _replay(model, "", policy, 4)  # 50 trace tokens, 60 replayed: the trace repeats from its start
    assert row["tokens replayed"] == 60
    assert row["measured hit rate"] == pytest.approx(row["simulated hit rate"], abs=1e-4)
    assert row["check"].startswith("agree")


def test_a_predictor_replays_over_a_byte_budget_unsimulated_with_its_precision_and_recall(model):
    from workbench.cli.notebooks.traces import NOT_SIMULATED, budget_mib

    row = _replay(model, "", "lru", 4, prefetch="oracle:precision=0.5,recall=0.8", overlap=True, cache="bytes")
    assert row["cache"] == f"{budget_mib(model, 4):.2f} MiB" and row["check"] == NOT_SIMULATED
    assert row["simulated hit rate"] is None and 0 < row["measured hit rate"] < 1
    assert 0.3 < row["prefetch precision"] < 0.7 and 0.65 < row["prefetch recall"] < 0.95
    per_layer = _replay(model, "", "lru", 4)
    assert per_layer["prefetch precision"] is None and per_layer["check"].startswith("agree")


def test_a_predictor_with_per_layer_caches_is_the_sessions_one_line(model):
    from workbench.errors import ParamError

    with pytest.raises(ParamError) as err:
        _replay(model, "", "lru", 4, prefetch="previous", overlap=True)
    assert "per-layer caches follow the trace in order" in str(err.value) and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def gguf_py_moe(tmp_path_factory):
    """A MoE GGUF written by gguf-py (not our writer): 2 layers x gate/up/down of 8 experts, f16."""
    from foreign_writers import write_gguf_moe

    rng = np.random.default_rng(5)

    def add(writer):
        for layer in range(2):
            for part, shape in (("gate", (8, 48, 64)), ("up", (8, 48, 64)), ("down", (8, 64, 48))):
                writer.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", rng.standard_normal(shape).astype(np.float16))
    return write_gguf_moe(tmp_path_factory.mktemp("gguf-py") / "moe.gguf", add, blocks=2, experts=8, used=2)


def test_a_jsonl_trace_with_a_gap_replays_on_a_gguf_py_model_and_says_what_it_dropped(gguf_py_moe, tmp_path):
    from workbench.cli.notebooks.traces import simulate_trace

    rng = np.random.default_rng(3)
    lines = [json.dumps({"layer": layer, "token": t, "experts": rng.choice(8, 2, replace=False).tolist(),
                         "gating_probs": [0.7, 0.3]})
             for t in range(40) for layer in range(2) if (t, layer) != (7, 1)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    sim = simulate_trace(path, ["lru"], [2, 4], 8)
    assert "replayed as a session would: 1 of 40 tokens dropped" in " ".join(sim.caveats())
    row = _replay(gguf_py_moe, str(path), "lru", 4)
    assert row["measured hit rate"] == pytest.approx(row["simulated hit rate"], abs=1e-4)


def test_a_trace_of_more_layers_replays_its_first_ones_and_fewer_is_one_line(model, tmp_path):
    from workbench.cli.notebooks.traces import trace_inputs
    from workbench.expert.routing import save_trace, synthetic_trace

    kw = dict(size="8MiB", experts=16, k=2, tokens=50, seed=0, skew=1.0, stickiness=0.35)
    many = tmp_path / "many.csv"
    save_trace(synthetic_trace(30, tuple(range(6)), 16, 2, seed=1), many)
    inputs = trace_inputs(str(many), "", **kw)  # the synthetic 8 MiB model has 4 MoE layers
    assert inputs.trace == many and inputs.replay != many
    assert "replays the trace's layers 0 .. 3" in inputs.notes[0] and "cover all 6" in inputs.notes[0]
    from workbench.expert.routing import load_trace, moe_shape
    from workbench.formats import open_index

    layers, n = moe_shape(open_index(inputs.model).blobs)
    replayed, original = load_trace(inputs.replay, layers=layers, n_experts=n), load_trace(many)
    assert replayed.layers == layers and np.array_equal(replayed.experts, original.experts[:, :4])
    few = tmp_path / "few.csv"
    save_trace(synthetic_trace(30, (0, 1), 16, 2, seed=1), few)
    with pytest.raises(TraceError) as err:
        trace_inputs(str(few), "", **kw)
    assert "has 2 MoE layers, the synthetic model of 8MiB has 4" in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_sweep_lists_its_grid_and_a_two_point_sweep_runs_into_the_ledger(tmp_path):
    listed = CliRunner().invoke(main, ["sweep", str(ROOT / "data" / "sweeps" / "traces.yaml"), "--dry-run",
                                       "--out", str(tmp_path / "dry")])
    assert listed.exit_code == 0, listed.output
    assert "30 points" in listed.output and listed.output.count("07_traces-replay_experts=") == 30
    assert listed.output.count("sessions of 3 turns × 40 tokens (not a load sweep") == 30
    listed = CliRunner().invoke(main, ["sweep", str(ROOT / "data" / "sweeps" / "traces-prefetch.yaml"), "--dry-run",
                                       "--out", str(tmp_path / "dry")])
    assert listed.exit_code == 0, listed.output
    assert "10 points" in listed.output and "prefetch=oracle:precision=0.9,recall=0.9" in listed.output
    doc = {"notebook": "07_traces", "campaign": "t-traces", "parameters": {"replay_policy": "arc", **SMALL},
           "grid": {"prefetch": ["route", "none"]}}
    sweep = tmp_path / "traces.yaml"
    sweep.write_text(json.dumps(doc))
    store = tmp_path / "ledger.sqlite"
    ran = CliRunner().invoke(main, ["sweep", str(sweep), "--ledger", str(store), "--out", str(tmp_path / "runs")])
    assert ran.exit_code == 0, ran.output
    assert "2 done, 0 skipped (resumed), 0 failed" in ran.output
    with Ledger(store) as ledger:
        attempts = ledger.attempts("t-traces")
    assert list(attempts["kind"]) == ["session"] * 2 and set(attempts["verdict"]) == {"baseline"}
    assert all(h.startswith("arc with 4 experts a layer hits ") for h in attempts["hypothesis"])


def test_the_panels_controls_drive_the_action_as_typed_in_jupyterlab(tmp_path):
    from workbench.cli.notebooks.traces_panel import traces_panel

    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = {}
    exec(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", [])), {}, params)  # noqa: S102
    params.pop("autorun")
    params["ledger"] = str(tmp_path / "ledger.sqlite")
    params.pop("ledger_path")
    panel = traces_panel(**params)
    panel.controls["cache_experts"].value = "2, 6"  # a text box, as typed
    panel.controls["policies"].value = ("arc",)
    panel.controls["replay_experts"].value = 0  # no replay: nothing recorded
    items = panel.run(into_output=True)
    page = "".join(getattr(i, "data", "") for i in items if isinstance(getattr(i, "data", None), str))
    assert "N=2" in page and "N=6" in page and "N=4" not in page and ">arc<" in page and ">lru<" not in page
    assert not (tmp_path / "ledger.sqlite").exists() and panel.runs == 1
    assert "finished" in panel.status.value
