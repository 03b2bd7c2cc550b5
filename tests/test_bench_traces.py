"""benchmarks/bench/bench_traces.py end to end at a tiny size: every format read, stats and fit timed, the
fit's gaps against the tolerances, the machine and date recorded."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench"))

import bench_traces  # noqa: E402


def test_bench_traces_records_reads_stats_and_the_fit(tmp_path, capsys):
    out = tmp_path / "b.json"
    bench_traces.main(["--repeat", "1", "--tokens-scale", "0.05", "--shapes", "mixtral", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert {"machine", "started", "numpy", "load_average"} <= set(doc)
    (row,) = doc["shapes"]
    assert row["shape"] == "mixtral" and row["tokens"] == 200 and row["layers"] == 32
    assert set(row["read"]) == {"rows.csv", "rows.npy", "dense.npy", "hook.jsonl"}
    assert all(r["cpu_s"] >= 0 and r["bytes"] > 0 for r in row["read"].values())
    assert [g["measure"] for g in row["fit"]["gaps"]] == ["popularity", "overlap", "working_set"]
