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


def test_miss_breakdown_splits_each_path_by_phase(tmp_path):
    """benchmarks/bench/miss_breakdown.py at a tiny size: every phase row of the three paths, the decode
    thread's table, and the batched lanes' phases summing to slices actually sent."""
    import miss_breakdown
    from workbench.formats.synth import write_synthetic

    model = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=16 << 20, experts=16,
                            alignment=64, seed=3).path
    out = tmp_path / "b.md"
    assert miss_breakdown.main(["--model", str(model), "--cache-mib", "4", "--turns", "3", "--tokens", "2",
                                "--lanes", "2", "--rounds", "1", "--out", str(out), "--arms",
                                "unbatched,batched,batched free,batched free 2x,unbatched recycle,unbatched pool eager,"
                                "unbatched pool eager lock"]) == 0
    text = out.read_text()
    for row in ("| unbatched | lane: fill (read into the cache) |", "| unbatched | decode: put (every landed slice) |",
                "| batched | lane: copy into slots |", "| batched | lane: issue a slot's copy |",
                "| batched free | lane: fill (read into the cache) |", "| batched | lane: copies issued a slice |",
                "| unbatched recycle | decode: admit (a miss: evictions; recycle's moves) |"):
        assert row in text
    assert text.count("\n| unbatched | ") == 6 and "turn 0 left out" in text and "| batched free 2x |" in text
    for row in ("| unbatched | lane: preadv call (wall) |", "| unbatched | lane: preadv call (the lane on CPU) |",
                "| batched | lane: preadv call (wall) |", "| unbatched pool eager | lane: fill (read into the cache) |",
                "| unbatched pool eager lock | lane: preadv call (wall) |"):
        assert row in text
    calls = [line for line in text.splitlines() if line.startswith("| unbatched | lane: preadv call")]
    wall, cpu = (float(line.split("|")[3]) for line in calls)  # µs a call: the CPU in it is part of its wall
    assert 0 < cpu <= wall + 1 and float(calls[0].split("|")[4]) > 0
    assert miss_breakdown.main(["--model", str(model), "--arms", "unbatched,keep"]) == 2  # an unknown arm


def test_pread_refault_reads_into_each_state_of_page(tmp_path, capsys):
    import pread_refault

    f = tmp_path / "f.bin"
    f.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    assert pread_refault.main(["--file", str(f), "--slice", "12345", "--reps", "3"]) == 0
    out = capsys.readouterr().out
    from workbench.expert.memory import recycle_refusal

    for state in ("released", "released, populated first", "lazily freed", "resident",
                  *(() if recycle_refusal() else ("moved in",))):
        assert f"into {state} pages: " in out
    assert pread_refault.main(["--file", str(f), "--slice", "12345", "--reps", "3", "--huge-pages"]) == 0
    assert "huge pages asked for" in capsys.readouterr().out


def test_landed_over_stall_is_the_landed_bytes_over_the_tokens_stall():
    """The figure bench_miss holds against the ring (issue 34 §5): every landed byte over every token's stall."""
    from types import SimpleNamespace

    from workbench.measure.session.ab_metrics import SHOWN

    turns = [SimpleNamespace(landed_bytes=3e9, token_stall_s=(0.5, 1.0), tokens=2),
             SimpleNamespace(landed_bytes=1e9, token_stall_s=(0.5,), tokens=1)]
    assert SHOWN["landed GB/s over stall"](turns) == 2.0
    assert SHOWN["landed GB/s over stall"]([SimpleNamespace(landed_bytes=1e9, token_stall_s=(0.0,), tokens=1)]) == -1.0


def test_admit_cost_times_each_advices_releases_and_moves(tmp_path, capsys):
    """benchmarks/bench/admit_cost.py at a tiny size: a line an advice; recycle moves and recycles pages,
    dontneed neither; a --warm past --lookups is one line, exit 2."""
    import admit_cost
    from workbench.expert.memory import recycle_refusal
    from workbench.formats.synth import write_synthetic

    model = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=8 << 20, experts=16,
                            alignment=64, seed=5).path
    advices = "dontneed" + ("" if recycle_refusal() else ",recycle")
    assert admit_cost.main(["--model", str(model), "--cache-mib", "1", "--lookups", "400", "--warm", "100",
                            "--advices", advices]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("dontneed: admit ") and "move — µs × 0, recycled pages 0," in lines[0]
    if not recycle_refusal():
        assert lines[1].startswith("recycle: ") and "recycled pages 0," not in lines[1] and "move — " not in lines[1]
    assert admit_cost.main(["--model", str(model), "--lookups", "10", "--warm", "10"]) == 2
