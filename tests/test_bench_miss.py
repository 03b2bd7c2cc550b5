"""benchmarks/bench/bench_miss.py end to end at a tiny size on the host: the ring's rate, the batched A/B with
staged GB/s over the ring, the --miss A/B with the host's share and the per-token times, the checks."""
from __future__ import annotations

from test_bench_prefetch import locks  # noqa: F401 - its autouse lock directory; it puts benchmarks/bench on the path

import bench_miss  # noqa: E402


def test_bench_miss_writes_both_groups(tmp_path):
    out = tmp_path / "m.md"
    assert bench_miss.main(["--dir", str(tmp_path), "--size", "16MiB", "--experts", "16", "--cache-mib", "4",
                            "--turns", "3", "--tokens", "2", "--miss-turns", "3", "--miss-tokens", "2", "--rounds", "1",
                            "--ring-runs", "2", "--lanes", "2", "--out", str(out)]) == 0
    text = out.read_text()
    assert "(n = 2 fresh processes)" in text and "of the ring (cells" in text
    assert "| cell | arm | round | tok/s | staged GB/s | stall ms/token | fetch ms/token |" in text
    assert "| cell | arm | round | tok/s | host share | fetch ms/token | host ms/token | device ms/token |" in text
    assert "| miss=host | 1 | " in text and "ok: every cell read the same bytes per token" in text  # the batch A/B
    assert "n/a: bytes read per token differ" in text  # the miss A/B: by design
