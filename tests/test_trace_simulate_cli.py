"""``workbench trace simulate``: the table and --json say what the simulator computed, the same trace in
the engines' formats gives the same answer, and bad input is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.expert.policies.simulate import simulate
from workbench.expert.routing import save_trace, synthetic_trace


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, [0, 1, 2], 16, 2, distribution="zipf", seed=11)


@pytest.fixture
def csv_trace(tmp_path, trace):
    save_trace(trace, tmp_path / "t.csv")
    return str(tmp_path / "t.csv")


def _run(*args):
    return CliRunner().invoke(main, ["trace", "simulate", *args])


def test_json_is_the_simulators_results(csv_trace, trace):
    out = _run(csv_trace, "--cache-experts", "4,8", "--policy", "lru", "--policy", "arc", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    want = {(r.policy, r.cache_experts): r for r in simulate(trace, ["lru", "arc"], [4, 8])}
    assert {(r["policy"], r["cache_experts"]) for r in doc["results"]} == set(want)
    for r in doc["results"]:
        w = want[(r["policy"], r["cache_experts"])]
        assert r["hits"] == sum(w.hits) and r["lookups"] == 300 * 3 * 2
        assert [x["hit_rate"] for x in r["layers"]] == pytest.approx(list(w.layer_rates))
        bound = want[("belady", r["cache_experts"])].hit_rate
        assert r["of_belady"] == pytest.approx(w.hit_rate / bound)
    assert (doc["tokens"], doc["k"], doc["n_experts"], doc["layers"]) == (300, 2, 16, [0, 1, 2])


def test_text_table_names_every_policy_and_size(csv_trace):
    out = _run(csv_trace, "--cache-experts", "2", "--cache-experts", "6", "--layers")
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("policy"))
    assert "N=2" in header and "N=6" in header
    for name in ("belady", "lru", "fifo", "lfu", "arc", "static"):
        assert any(line.startswith(name + " ") for line in lines), name
    assert sum(line.startswith("layer ") for line in lines) == 2  # one per-layer table a size
    assert "lookups simulated" in lines[-1]


def test_engine_formats_give_the_same_answer(tmp_path, trace, csv_trace):
    # vLLM's routed-experts shape, written by numpy; and per-token JSONL records with gate weights
    np.save(tmp_path / "t.npy", np.asarray(trace.experts, dtype=np.int64))
    with open(tmp_path / "t.jsonl", "w") as fh:
        for t in range(trace.tokens):
            for i, layer in enumerate(trace.layers):
                experts = trace.experts[t, i].tolist()
                fh.write(json.dumps({"layer": layer, "token": t, "experts": experts,
                                     "gating_probs": [0.6, 0.4]}) + "\n")
    docs = [json.loads(_run(p, "--cache-experts", "4", "--policy", "lfu", "--json").stdout)["results"]
            for p in (csv_trace, str(tmp_path / "t.npy"), str(tmp_path / "t.jsonl"))]
    assert docs[0] == docs[1] == docs[2]


@pytest.mark.parametrize("args, detail", [
    (["--cache-experts", "1"], "must be in [2, 16]"),
    (["--cache-experts", "4", "--policy", "mru"], "is not one of"),
    (["--cache-experts", "four"], "whole numbers"),
])
def test_bad_options_are_one_line_exit_2(csv_trace, args, detail):
    out = _run(csv_trace, *args)
    assert out.exit_code == 2, out.output
    assert detail in out.output and len(out.output.strip().splitlines()) == 1


def test_a_bad_trace_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("token,layer,expert\n0,0,x\n")
    out = _run(str(bad), "--cache-experts", "2")
    assert out.exit_code == 2 and str(bad) in out.output and len(out.output.strip().splitlines()) == 1


def test_experts_never_routed_still_count(tmp_path):
    # a file names only the experts it routed: 6 of a model's 16 here, so N may reach 16 only with --experts
    tr = synthetic_trace(50, 2, 6, 2, seed=4)
    save_trace(tr, tmp_path / "few.csv")
    refused = _run(str(tmp_path / "few.csv"), "--cache-experts", "12")
    assert refused.exit_code == 2 and "must be in [2, 6]" in refused.output
    out = _run(str(tmp_path / "few.csv"), "--cache-experts", "12", "--experts", "16", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["n_experts"] == 16 and {r["hits"] for r in doc["results"]} == {50 * 2 * 2 - 12}  # first uses only
    below = _run(str(tmp_path / "few.csv"), "--cache-experts", "2", "--experts", "4")
    assert below.exit_code == 2 and "routes expert 5" in below.output and len(below.output.strip().splitlines()) == 1
