"""A session replaying a trace with per-layer caches of N experts measures the hit rate the simulator
predicts for the same trace, policy and N (issue 34, section 2: simulation and measurement check each other)."""
from __future__ import annotations

import pytest

from workbench.errors import ParamError
from workbench.expert.policies.partition import unit_bytes
from workbench.expert.policies.simulate import simulate
from workbench.expert.routing import load_trace, moe_shape, save_trace, synthetic_trace
from workbench.expert.session import ExpertSession, SessionConfig
from workbench.upload.host import HostDevice

POLICIES = ["lru", "fifo", "lfu:5", "arc", "static", "belady"]


@pytest.fixture(scope="module")
def moe(synth_model):
    """An alignment-64 GGUF MoE: 2 layers x 3 blobs x 32 experts, slices off page boundaries."""
    return synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=32)


@pytest.fixture(scope="module")
def trace_file(moe, tmp_path_factory):
    layers, n = moe_shape(moe.blobs)
    path = tmp_path_factory.mktemp("trace") / "zipf.csv"
    save_trace(synthetic_trace(60, layers, n, 4, distribution="zipf", zipf_s=1.1, seed=3), path)
    return str(path)


def _replay(index, trace, **kw):
    cfg = SessionConfig(turns=3, tokens=20, trace=trace, **kw)
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        s.finish_checks()
        live = s.cache.live_keys()
        return records, s.facts, live


@pytest.mark.parametrize("lanes, overlap", [(1, False), (2, True)])
@pytest.mark.parametrize("policy", POLICIES)
def test_session_hit_rate_is_the_simulators(moe, trace_file, policy, lanes, overlap):
    n = 8
    records, facts, live = _replay(moe, trace_file, cache_experts=n, policy=policy, lanes=lanes, overlap=overlap,
                                   verify=True, verify_end=True)
    predicted = next(r for r in simulate(load_trace(trace_file), [policy], [n]) if r.policy == policy)
    blobs_per_layer = len(moe.blobs) // len(predicted.layers)
    hits, lookups = sum(r.hits for r in records), sum(r.hits + r.misses for r in records)
    assert lookups == predicted.lookups * blobs_per_layer
    assert hits == sum(predicted.hits) * blobs_per_layer  # every slice of an expert shares its fate
    assert abs(hits / lookups - predicted.hit_rate) < 0.01
    # N experts a layer, in bytes: what the facts report as the budget
    by_layer = {b.layer: [x for x in moe.blobs if x.layer == b.layer] for b in moe.blobs}
    assert facts.cache_bytes == sum(n * unit_bytes(bs) for bs in by_layer.values())
    assert facts.policy.startswith(policy) and "per layer (8 experts)" in facts.policy
    layer_of = [b.layer for b in moe.blobs]
    for layer in by_layer:  # what stays live is at most N experts a layer (static: passing ones dropped)
        assert len({k.expert for k in live if layer_of[k.blob] == layer}) <= n


def test_a_static_cache_keeps_only_the_hot_experts(moe, trace_file):
    _, _, live = _replay(moe, trace_file, cache_experts=4, policy="static")
    trace = load_trace(trace_file)
    from workbench.expert.policies.offline import hot_experts

    hot = hot_experts(trace.experts, trace.n_experts, 4)
    layer_row = {layer: i for i, layer in enumerate(trace.layers)}
    assert live and all(hot[layer_row[moe.blobs[k.blob].layer], k.expert] for k in live)


@pytest.mark.parametrize("kw, detail", [
    ({"policy": "arc"}, "give --cache-experts N"),
    ({"policy": "lru", "cache_experts": 8, "cache_mib": 4.0}, "not both"),
    ({"policy": "lru", "cache_experts": 2}, "must be in [4, 32]"),
    ({"policy": "mru", "cache_experts": 8}, "is not one of"),
    ({"policy": "lru", "cache_experts": 8, "overlap": True, "prefetch": "previous"}, "follow the trace in order"),
])
def test_bad_per_layer_options_are_one_line(moe, trace_file, kw, detail):
    with pytest.raises(ParamError) as err:
        _replay(moe, trace_file, **kw)
    assert detail in str(err.value) and "\n" not in str(err.value)


def test_session_command_runs_a_policy_per_layer(moe, trace_file, tmp_path, isolated_cache, monkeypatch):
    import json

    from click.testing import CliRunner

    from workbench.cli import main

    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    args = ["session", moe.path, "--trace", trace_file, "--turns", "2", "--tokens", "30", "--cache-experts", "8"]
    out = CliRunner().invoke(main, args + ["--policy", "lfu:5", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    predicted = next(r for r in simulate(load_trace(trace_file), ["lfu:5"], [8]) if r.policy == "lfu:5")
    turns = doc["turns"]
    hits, lookups = sum(t["hits"] for t in turns), sum(t["hits"] + t["misses"] for t in turns)
    assert hits / lookups == pytest.approx(predicted.hit_rate)
    bad = CliRunner().invoke(main, args[:-2] + ["--policy", "belady"])
    assert bad.exit_code == 2 and "give --cache-experts N" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_the_label_names_the_policy_and_the_per_layer_cache():
    from workbench.measure.session.runner import session_label

    label = session_label("m.gguf", SessionConfig(turns=2, tokens=4, cache_experts=8, policy="arc"))
    assert "policy=arc" in label and "cache=8/layer" in label
    assert "policy" not in session_label("m.gguf", SessionConfig(turns=2, tokens=4))  # lru, the default, unsaid


@pytest.fixture(scope="module")
def gguf_py_moe(tmp_path_factory):
    """A MoE GGUF written by gguf-py's own writer (not ours): 2 layers x gate/up/down of 8 experts, f16."""
    import numpy as np
    from gguf import GGUFWriter

    from workbench.formats import open_index

    path = tmp_path_factory.mktemp("gguf-py") / "moe.gguf"
    rng = np.random.default_rng(5)
    writer = GGUFWriter(str(path), "qwen3moe")
    for layer in range(2):
        for part, shape in (("gate", (8, 48, 64)), ("up", (8, 48, 64)), ("down", (8, 64, 48))):
            writer.add_tensor(f"blk.{layer}.ffn_{part}_exps.weight", rng.standard_normal(shape).astype(np.float16))
    writer.add_block_count(2)
    writer.add_expert_count(8)
    writer.add_expert_used_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return open_index(path)


@pytest.mark.parametrize("policy", ["lru", "lfu", "arc", "static", "belady"])
def test_session_on_a_gguf_py_file_hits_what_the_simulator_predicts(gguf_py_moe, tmp_path, policy):
    layers, n = moe_shape(gguf_py_moe.blobs)
    assert (len(layers), n, len(gguf_py_moe.blobs)) == (2, 8, 6)
    save_trace(synthetic_trace(60, layers, n, 2, distribution="zipf", seed=8), tmp_path / "t.npy")
    records, _, _ = _replay(gguf_py_moe, str(tmp_path / "t.npy"), cache_experts=4, policy=policy, placement="aligned",
                            verify=True)
    predicted = next(r for r in simulate(load_trace(tmp_path / "t.npy"), [policy], [4]) if r.policy == policy)
    assert sum(r.hits for r in records) == 3 * sum(predicted.hits)
    assert sum(r.hits + r.misses for r in records) == 3 * predicted.lookups


@pytest.mark.parametrize("policy", ["lru", "static", "belady"])
def test_a_session_longer_than_its_trace_hits_what_its_replay_simulates(moe, tmp_path, policy):
    import numpy as np

    from workbench.expert.routing import RoutingTrace

    layers, n = moe_shape(moe.blobs)
    short = synthetic_trace(25, layers, n, 4, distribution="zipf", seed=6)
    save_trace(short, tmp_path / "short.csv")
    records, facts, _ = _replay(moe, str(tmp_path / "short.csv"), cache_experts=8, policy=policy)
    assert "replayed 2.4 times" in facts.trace_note
    replay = RoutingTrace(short.experts[np.arange(60) % 25], short.layers, n, "replay")  # the 60 tokens it ran
    predicted = next(r for r in simulate(replay, [policy], [8]) if r.policy == policy)
    assert sum(r.hits for r in records) == 3 * sum(predicted.hits)


def test_a_session_ab_cell_shows_its_hit_rate():
    from types import SimpleNamespace

    from workbench.measure.session.ab_metrics import SHOWN

    turns = [SimpleNamespace(hits=30, misses=10), SimpleNamespace(hits=45, misses=15)]
    assert SHOWN["hit rate"](turns) == 0.75


def test_the_summary_line_names_the_policy_and_the_cache(moe, trace_file):
    from workbench.measure.session.record import summary_line

    cfg = SessionConfig(turns=2, tokens=10, trace=trace_file, cache_experts=8, policy="arc")
    with ExpertSession(moe, HostDevice(), cfg) as s:
        list(s.turns())
        line = summary_line(s.report())
    assert "(arc per layer (8 experts), cache " in line
