"""Trace statistics (workbench/expert/traces/stats.py) against brute force and hand-checked cases,
gaps included: temporal statistics never reach across a gap."""
from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.expert.traces import Trace, trace_stats


def make(positions, experts, n, gates=None):
    """A one-layer trace from plain lists."""
    pos = np.asarray(positions, np.int64)
    exp = np.asarray(experts, np.int32)
    g = None if gates is None else (np.asarray(gates, np.float32),)
    return Trace((0,), (pos,), (exp,), g, n, "hand")


def brute(positions, experts, n):
    """Overlap, reuse distances and working set by definition, run by run."""
    runs, cur = [], [0]
    for j in range(1, len(positions)):
        if positions[j] - positions[j - 1] == 1:
            cur.append(j)
        else:
            runs.append(cur)
            cur = [j]
    runs.append(cur)
    shared, pairs, dist, first, ws = 0, 0, [], 0, {}
    for run in runs:
        sets = [set(experts[j]) for j in run]
        for a, b in zip(sets, sets[1:]):
            shared, pairs = shared + len(a & b), pairs + 1
        for t, s in enumerate(sets):
            for e in s:
                before = [u for u in range(t) if e in sets[u]]
                if before:
                    dist.append(t - before[-1])
                else:
                    first += 1
        for window in (1, 2, 4, 8, 16):
            for s0 in range(len(sets) - window + 1):
                ws.setdefault(window, []).append(len(set().union(*sets[s0:s0 + window])))
    k = len(experts[0])
    return shared / (k * pairs), dist, first, {w: np.mean(v) / n for w, v in ws.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_temporal_statistics_equal_brute_force_with_gaps(seed):
    rng = np.random.default_rng(seed)
    n, k, tokens = 6, 2, 40
    positions = np.sort(rng.choice(60, tokens, replace=False))  # gaps wherever a position was skipped
    experts = np.array([rng.choice(n, k, replace=False, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05]) for _ in range(tokens)])
    stats = trace_stats(make(positions, experts, n))
    overlap, dist, first, ws = brute(positions.tolist(), experts.tolist(), n)
    row = stats.summary.iloc[0]
    assert row["overlap"] == pytest.approx(overlap) and row["reuse_median"] == pytest.approx(np.median(dist))
    reuse = stats.reuse[stats.reuse["layer"] == 0].set_index("distance")["lookups"]
    assert reuse["first"] == first and reuse["1"] == dist.count(1) and reuse["2"] == dist.count(2)
    assert reuse["3-4"] == sum(3 <= d <= 4 for d in dist) and reuse.sum() == tokens * k
    got = stats.working_set[stats.working_set["layer"] == 0].set_index("window")["fraction"]
    for window, fraction in ws.items():
        assert got[window] == pytest.approx(fraction), window


def test_a_gap_is_not_read_as_reuse():
    # tokens 0,1 then 5,6: the same experts on both sides of the gap
    stats = trace_stats(make([0, 1, 5, 6], [[0, 1], [2, 3], [2, 3], [0, 1]], 4))
    row = stats.summary.iloc[0]
    assert row["runs"] == 2 and row["overlap"] == 0.0  # 1 -> 5 is not "the previous token"
    reuse = stats.reuse[stats.reuse["layer"] == 0].set_index("distance")["lookups"]
    assert reuse["first"] == 8


def test_popularity_skew_hand_checked():
    uniform = trace_stats(make(range(4), [[0, 1], [2, 3], [0, 1], [2, 3]], 4)).summary.iloc[0]
    assert uniform["gini"] == pytest.approx(0) and uniform["entropy"] == pytest.approx(1)
    assert uniform["top_share"] == pytest.approx(1) and uniform["half_set"] == 0.5 and uniform["used"] == 1
    skewed = trace_stats(make(range(4), [[0, 1], [0, 2], [0, 1], [0, 3]], 8)).summary.iloc[0]
    # shares 4/8, 2/8, 1/8, 1/8 of 8 experts: expert 0 alone carries half
    assert skewed["top_share"] == pytest.approx(4) and skewed["half_set"] == pytest.approx(1 / 8)
    assert skewed["used"] == 0.5 and skewed["overlap_uniform"] == 2 / 8
    counts = np.array([0, 0, 0, 0, 1, 1, 2, 4], float)
    gini = np.abs(counts[:, None] - counts[None, :]).sum() / (2 * len(counts) ** 2 * counts.mean())
    assert skewed["gini"] == pytest.approx(gini)


def test_gate_mass_of_the_top_expert():
    stats = trace_stats(make(range(2), [[0, 1], [2, 3]], 4, gates=[[0.6, 0.2], [0.1, 0.3]]))
    row = stats.summary.iloc[0]
    assert row["gate_top"] == pytest.approx((0.6 + 0.3) / 2) and row["gate_top_share"] == pytest.approx((0.75 + 0.75) / 2)
    assert np.isnan(trace_stats(make(range(2), [[0, 1], [2, 3]], 4)).summary.iloc[0]["gate_top"])


def test_frames_and_json_pool_the_layers():
    rng = np.random.default_rng(3)
    pos = np.arange(30)
    tr = Trace((2, 7), (pos, pos), tuple(np.array([rng.choice(8, 2, replace=False) for _ in pos], np.int32)
                                          for _ in range(2)), None, 8, "two layers")
    stats = trace_stats(tr)
    assert stats.summary["layer"].tolist() == [2, 7, "all"]
    assert set(stats.frames()) == {"summary", "popularity", "reuse", "working_set"}
    assert stats.popularity.groupby("layer")["share"].sum().tolist() == pytest.approx([1, 1])
    doc = stats.to_json()
    assert doc["summary"][-1]["layer"] == "all" and doc["summary"][0]["gate_top"] is None
    json.dumps(doc, allow_nan=False)  # plain JSON: no NaN, no numpy scalars


def test_the_models_expert_count_counts_experts_never_routed(tmp_path):
    from click.testing import CliRunner

    from workbench.cli import main
    from workbench.errors import TraceError

    tr = make(range(4), [[0, 1], [0, 2], [0, 1], [0, 3]], 4)
    assert trace_stats(tr).summary.iloc[0]["used"] == 1.0  # 4 of the 4 the file shows
    wide = tr.with_experts(16)
    assert trace_stats(wide).summary.iloc[0]["used"] == 0.25 and wide.n_experts == 16
    with pytest.raises(TraceError, match="routes expert 3"):
        tr.with_experts(3)
    (tmp_path / "t.csv").write_text("0,0,0\n0,0,1\n1,0,0\n1,0,2\n")
    result = CliRunner().invoke(main, ["trace", "stats", str(tmp_path / "t.csv"), "--experts", "64", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["n_experts"] == 64
    assert json.loads(result.stdout)["summary"][0]["used"] == 3 / 64
    refused = CliRunner().invoke(main, ["trace", "stats", str(tmp_path / "t.csv"), "--experts", "2"])
    assert refused.exit_code == 2 and "routes expert 2" in refused.stderr
