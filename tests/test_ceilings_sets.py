"""Walls over a model that is a set of files: a whole-model read reads every file, and it bounds only
loads of that model."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from workbench.io.envinfo import eviction_support
from workbench.io.pagecache import resident_fraction
from workbench.ledger import Ledger
from workbench.measure import RunConfig
from workbench.measure.ceilings.bounds import host_ceilings
from workbench.measure.ceilings.walls import measure_ceilings
from workbench.measure.ceilings.reads import _shares
from workbench.measure.run.runner import measure_with
from workbench.measure.run.spawn import Outcome


@pytest.mark.parametrize("sizes, threads, chunk", [
    ([10, 7, 0, 5], 3, 2), ([4096], 4, 1024), ([3, 3, 3], 1, 4), ([1, 100], 8, 8), ([5, 5], 16, 1),
])
def test_shares_read_every_byte_of_every_file_once(sizes, threads, chunk) -> None:
    shares = _shares(sizes, threads, chunk)
    assert len(shares) <= threads
    seen = [[0] * n for n in sizes]
    for share in shares:
        for k, lo, hi in share:
            assert 0 <= lo < hi <= sizes[k]
            for b in range(lo, hi):
                seen[k][b] += 1
    assert all(all(c == 1 for c in counts) for counts in seen)
    flat = [(k, lo) for share in shares for k, lo, _ in share]
    assert flat == sorted(flat)  # each thread's share follows the previous one's: files laid end to end


@pytest.fixture
def model(sharded_model, tmp_path: Path):
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    index = sharded_model("gguf", "dense", shards=3)
    return index


def test_a_whole_model_read_of_a_set_reads_every_file_cold_and_warm(model, tmp_path: Path) -> None:
    shard = model.files[1].path  # any shard names the set
    report = measure_ceilings(tmp_path, devices=(), size=4 << 20, threads=[1], file=shard, file_threads=[1, 2],
                              record=False, lock_dir=tmp_path / "locks")
    walls = {c.name: c for c in report.ceilings}
    assert {"cold_read_file_1t", "cold_read_file_2t", "page_cache_read_file_1t", "page_cache_read_file_2t"} <= set(walls)
    for wall in (walls["cold_read_file_2t"], walls["page_cache_read_file_2t"]):
        assert wall.detail["bytes"] == model.size == sum(f.size for f in model.files)
        assert (wall.detail["files"], wall.detail["model"], wall.detail["file"]) == (3, model.path, shard)
    assert all(resident_fraction(f.path) == 1.0 for f in model.files)  # every file left warm


def test_a_whole_model_wall_bounds_only_loads_of_that_model(model, tmp_path: Path, isolated_cache: Path) -> None:
    directory = os.path.dirname(model.files[0].path)
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    with Ledger(tmp_path / "l.sqlite") as ledger:
        measure_ceilings(tmp_path, devices=("host",), size=4 << 20, threads=[1], file=directory, file_threads=[1],
                         ledger=ledger, lock_dir=tmp_path / "locks")
        assert "page_cache_read_file_1t" in host_ceilings(ledger, model=model.path)
        assert "page_cache_read_file_1t" in host_ceilings(ledger)  # no model: every wall, as before
        assert not any("_read_file_" in n for n in host_ceilings(ledger, model=str(copy / model.files[0].name)))

        def quick(config: RunConfig) -> Outcome:
            return Outcome(pid=os.getpid(), load_s=0.01, wall_s=0.02, bytes=model.size, verified=True)

        ours, theirs = measure_with(quick, [RunConfig(directory, "pread"), RunConfig(str(copy), "pread")], runs=1,
                                    cache="warm", ledger=ledger, lock_dir=tmp_path / "locks")
        assert ours.ceiling_name == "page_cache_read_file_1t"
        assert theirs.ceiling_name and "_read_file_" not in theirs.ceiling_name  # another model's read: not its wall
