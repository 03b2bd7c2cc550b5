"""A generator fitted to a trace (workbench/expert/traces/fit.py, sticky.py) reproduces its source's
statistics within the stated tolerances; its parameter file drives a session's routing; ``workbench
trace stats`` / ``fit`` on every format, and a bad trace is one line and exit 2 wherever it is read."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import TraceError
from workbench.expert.routing import load_trace, moe_shape
from workbench.expert.traces import (TOLERANCES, StickyModel, as_trace, fit_trace, load_model, save_model,
                                     trace_bytes)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench"))

import bench_traces  # noqa: E402


def sticky_source(tokens=4000, seed=5):
    """A trace from known parameters: four layers of their own popularity and stickiness."""
    weights = np.array([np.random.default_rng(i).dirichlet(np.ones(16) * 0.7) for i in range(4)])
    truth = StickyModel((0, 1, 2, 3), 16, 2, weights, np.array([0.1, 0.3, 0.5, 0.7]), np.zeros(4), np.ones(4))
    return truth, as_trace(truth.synthesize(tokens, seed=seed))


def phase_source():
    """Not the model's kind of trace: topics of 200 tokens, each with its own hot experts (the benchmark's)."""
    return as_trace(bench_traces.phases(4000, n=64, k=8, segment=200))


def gaps(result):
    return result.deviation.set_index("measure")["largest_gap"]


def test_the_fit_reproduces_a_sticky_source_within_the_tolerances():
    truth, source = sticky_source()
    result = fit_trace(source, seed=0)
    assert result.within, result.deviation
    assert np.abs(result.model.stickiness - truth.stickiness).max() < 0.1  # and finds what made it
    original = result.original.summary.set_index("layer")
    fitted = result.fitted.summary.set_index("layer")
    for column in ("gini", "top_share", "overlap"):
        assert fitted.loc["all", column] == pytest.approx(original.loc["all", column], rel=0.05), column


def test_the_fit_follows_the_working_set_of_a_trace_with_phases():
    # one-token stickiness alone leaves this working set 0.3 off (the recent history is what follows it)
    result = fit_trace(phase_source(), seed=0)
    assert gaps(result)["working_set"] <= TOLERANCES["working_set"], result.deviation
    assert gaps(result)["overlap"] <= TOLERANCES["overlap"], result.deviation
    assert result.model.recency.min() > 0
    # this source's popularity moves between its own halves more than the fit misses it by
    row = result.deviation.set_index("measure").loc["popularity"]
    assert row["largest_gap"] <= max(TOLERANCES["popularity"], row["source_halves_gap"])


def test_the_model_file_round_trips_and_a_session_synthesizes_from_it(tmp_path, synth_model):
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    layers, n_experts = moe_shape(index.blobs)
    weights = np.random.default_rng(0).dirichlet(np.ones(n_experts), size=len(layers))
    model = StickyModel(layers, n_experts, 2, weights, np.full(len(layers), 0.4), np.full(len(layers), 0.5),
                        np.full(len(layers), 16.0), fitted_to="hand")
    save_model(model, tmp_path / "m.json")
    back = load_model(tmp_path / "m.json")
    assert back.layers == layers and np.allclose(back.weights, weights, rtol=1e-5) and back.memory.tolist() == [16.0] * len(layers)
    a = load_trace(tmp_path / "m.json", layers=layers, n_experts=n_experts, tokens=48, seed=3)
    b = load_trace(tmp_path / "m.json", layers=layers, n_experts=n_experts, tokens=48, seed=3)
    c = load_trace(tmp_path / "m.json", layers=layers, n_experts=n_experts, tokens=48, seed=4)
    assert a.tokens == 48 and a.layers == layers and np.array_equal(a.experts, b.experts)
    assert not np.array_equal(a.experts, c.experts)
    from workbench.expert.session_config import SessionConfig, routing

    trace, note = routing(index, SessionConfig(turns=3, tokens=5, trace=str(tmp_path / "m.json"), seed=3))
    assert trace.tokens == 15 and note == ""


@pytest.mark.parametrize("doc,message", [
    ({"format": "other"}, "not a routing-model file"),
    ({"format": "workbench-routing-model", "kind": "sticky", "layers": [0], "n_experts": 4, "k": 2,
      "weights": [[1, 1, 1]], "stickiness": [0.5]}, "do not agree"),
    ({"format": "workbench-routing-model", "kind": "sticky", "layers": [0], "n_experts": 4, "k": 2,
      "weights": [[1, 1, 1, 1]], "stickiness": [1.5]}, "do not agree"),
    ({"format": "workbench-routing-model", "kind": "sticky", "layers": [0], "n_experts": 10**20, "k": 2,
      "weights": [[1]], "stickiness": [0.5]}, "bad or missing field"),
    ({"format": "workbench-routing-model", "kind": "sticky", "n_experts": 4}, "bad or missing field"),
    ({"format": "workbench-routing-model", "kind": "sticky", "layers": [0], "n_experts": 4, "k": 2,
      "weights": [[1, 1, 1, 1]], "stickiness": [0.5], "gates": [[0.5, 0.2]]}, "gates must be"),
])
def test_a_bad_model_file_is_one_line(tmp_path, doc, message):
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=message) as err:
        load_model(tmp_path / "m.json")
    assert "\n" not in str(err.value)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def formats(tmp_path):
    """One small trace in each format, written as engines and hooks write them."""
    rng = np.random.default_rng(0)
    routed = np.stack([np.stack([rng.choice(8, 2, replace=False) for _ in range(3)]) for _ in range(50)])
    np.save(tmp_path / "routed.npy", routed)  # [tokens, layers, k]
    rows = [(t, layer, int(e)) for t in range(50) for layer in range(3) for e in routed[t, layer]]
    (tmp_path / "rows.csv").write_text("token,layer,expert\n" + "".join(f"{t},{l},{e}\n" for t, l, e in rows))
    np.save(tmp_path / "rows.npy", np.array(rows, np.int64))
    (tmp_path / "hook.jsonl").write_text("".join(json.dumps(
        {"layer": layer, "token": t, "experts": routed[t, layer].tolist(), "gating_probs": [0.7, 0.2]}) + "\n"
        for t in range(50) for layer in range(3)))
    return [tmp_path / n for n in ("routed.npy", "rows.csv", "rows.npy", "hook.jsonl")]


def test_trace_stats_reads_every_format_alike(tmp_path):
    docs = []
    for path in formats(tmp_path):
        text = cli("trace", "stats", path)
        assert text.exit_code == 0 and "working set" in text.stdout and "reuse distance" in text.stdout
        result = cli("trace", "stats", path, "--json")
        assert result.exit_code == 0
        docs.append(json.loads(result.stdout))
    summaries = [[{k: v for k, v in row.items() if not k.startswith("gate")} for row in d["summary"]] for d in docs]
    assert all(s == summaries[0] for s in summaries)  # the same routing, whatever the format
    assert docs[3]["summary"][-1]["gate_top_share"] == pytest.approx(0.7 / 0.9)


def test_trace_fit_writes_parameters_and_a_fitted_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = formats(tmp_path)[3]
    result = cli("trace", "fit", path, "--tokens", "400", "--write-trace", tmp_path / "long.npy")
    assert result.exit_code == 0, result.output
    assert "original" in result.stdout and "largest gap" in result.stdout
    model = load_model(tmp_path / "hook.model.json")
    assert model.layers == (0, 1, 2) and model.k == 2
    long = cli("trace", "stats", tmp_path / "long.npy", "--json")
    assert json.loads(long.stdout)["summary"][-1]["tokens"] == 400
    refused = cli("trace", "fit", path, "--out", path)  # never over its own input
    assert refused.exit_code == 2 and "own input" in refused.stderr


def test_a_hostile_trace_is_one_line_and_exit_2_everywhere(tmp_path, synth_model):
    header = repr({"descr": "<i8", "fortran_order": False, "shape": (10**11, 3)}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    huge = tmp_path / "huge.npy"
    huge.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 49)
    big = tmp_path / "big.csv"
    big.write_text("0,0,1\n0,0,100000000000000000000\n")
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    for trace in (huge, big):
        for args in (("trace", "stats", trace), ("trace", "fit", trace, "--out", tmp_path / "m.json"),
                     ("session", index.path, "--trace", trace, "--turns", "1", "--tokens", "1",
                      "--ledger", tmp_path / "l.sqlite")):
            result = cli(*args)
            assert result.exit_code == 2, (args, result.output)
            assert result.stderr.count("\n") == 1 and str(trace) in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "l.sqlite").exists() or "session" not in (tmp_path / "l.sqlite").read_bytes().decode("latin-1")


def test_a_session_runs_on_a_fitted_model(tmp_path, synth_model, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    layers, n_experts = moe_shape(index.blobs)
    source = StickyModel(layers, n_experts, 2, np.random.default_rng(1).dirichlet(np.ones(n_experts) * 0.3,
                         size=len(layers)), np.full(len(layers), 0.5), np.zeros(len(layers)), np.ones(len(layers)))
    (tmp_path / "real.npy").write_bytes(trace_bytes(source.synthesize(300, seed=2), "real.npy"))
    fitted = cli("trace", "fit", tmp_path / "real.npy", "--out", tmp_path / "real.model.json", "--tokens", "300")
    assert fitted.exit_code == 0, fitted.output
    result = cli("session", index.path, "--trace", tmp_path / "real.model.json", "--turns", "2", "--tokens", "8",
                 "--cache-mib", "0.5", "--ledger", tmp_path / "l.sqlite", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["turns"]) == 2 and sum(t["hits"] + t["misses"] for t in doc["turns"]) > 0


def test_a_trace_too_short_to_judge_says_so(tmp_path):
    (tmp_path / "one.csv").write_text("0,0,1\n0,0,2\n0,1,3\n0,1,0\n")  # one token: no overlap, no halves
    result = cli("trace", "fit", tmp_path / "one.csv", "--out", tmp_path / "one.json", "--tokens", "50")
    assert result.exit_code == 0, result.output
    assert "too short to show its own spread" in result.stdout and "does not capture" not in result.stdout


def test_the_fitted_trace_carries_the_sources_gate_weights(tmp_path):
    rng = np.random.default_rng(4)
    records = []
    for t in range(400):
        for layer in (0, 1):
            probs = rng.dirichlet(np.ones(8) * (0.3 if layer else 3.0))  # a peaked layer and a flat one
            top = np.argsort(-probs)[:2]
            records.append({"layer": layer, "token": t, "experts": top.tolist(), "gating_probs": probs[top].tolist()})
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    from workbench.expert.traces import read_trace

    result = fit_trace(read_trace(tmp_path / "g.jsonl"), tokens=4000)
    a = result.original.summary.set_index("layer")
    b = result.fitted.summary.set_index("layer")
    for layer in (0, 1):
        assert b.loc[layer, "gate_top_share"] == pytest.approx(a.loc[layer, "gate_top_share"], abs=0.02)
        assert b.loc[layer, "gate_top"] == pytest.approx(a.loc[layer, "gate_top"], abs=0.02)
    assert a.loc[1, "gate_top_share"] > a.loc[0, "gate_top_share"] + 0.1  # the layers differ, and so do the fits
    save_model(result.model, tmp_path / "g.json")
    back = load_model(tmp_path / "g.json")
    assert back.gates.shape == (2, 256, 2)
    again = back.synthesize(50, seed=1)
    assert again.gates.shape == (50, 2, 2) and np.array_equal(again.experts, result.model.synthesize(50, seed=1).experts)
    without = StickyModel(back.layers, back.n_experts, back.k, back.weights, back.stickiness, back.recency, back.memory)
    assert without.synthesize(50, seed=1).gates is None
    assert np.array_equal(without.synthesize(50, seed=1).experts, again.experts)  # gates draw from their own stream
