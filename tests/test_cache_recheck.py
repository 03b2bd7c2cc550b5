"""A verified cache state holds until the load starts: a warm model is warm in every page (a hole that
sits in one blob is read, not averaged away), a state lost between the runner's check and the worker's
window (reclaim) is put back by the worker and the run says so, and a state that cannot be put back is
recorded as not reached."""
from __future__ import annotations

import os

import numpy as np
import pytest

from workbench.cli.commands.results_out import report_results
from workbench.expert.blobs import pack_blobs
from workbench.formats.index import PAGE_SIZE
from workbench.formats.synth import write_synthetic
from workbench.io.modelcache import prepare_model
from workbench.io.pagecache import evict_file_pages, resident_fraction, resident_map, warm_file
from workbench.measure.run.model import cache_request
from workbench.measure.run.runner import measure_with
from workbench.measure.run.spawn import Outcome, run_worker
from workbench.measure.run.worker import run_load
from workbench.records import CacheRecheck, RunConfig, WorkerReport


@pytest.fixture()
def moe(tmp_path):
    """A 16 MiB MoE GGUF of this test's own (its residency is the test's to change), written back to disk."""
    index = write_synthetic(tmp_path / "moe.gguf", format="gguf", layout="moe", size=16 << 20, experts=64,
                            alignment=64, seed=3)
    fd = os.open(index.path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return index


def _blob_fractions(index) -> list[float]:
    pages = resident_map(index.path)
    out = []
    for p in pack_blobs(index)[0]:
        lo, hi = p.blob.offset // PAGE_SIZE, -(-(p.blob.offset + p.nbytes) // PAGE_SIZE)
        out.append(float(np.count_nonzero(pages[lo:hi])) / (hi - lo))
    return out


def _blob_fact(engaged) -> str:
    return next(str(e) for e in engaged if str(e).startswith("blob_zero_copy"))


def test_warm_reads_a_hole_that_sits_in_one_blob(moe):
    # as an expert cache's evictions leave a file: 98 % resident, every missing page in one blob
    warm_file(moe.path)
    blob = pack_blobs(moe)[0][2]
    evict_file_pages(moe.path, (blob.blob.offset // PAGE_SIZE + 2) * PAGE_SIZE, 75 * PAGE_SIZE)
    assert resident_fraction(moe.path) >= 0.98 and min(_blob_fractions(moe)) < 0.9  # the file counts as warm
    got = prepare_model(moe.path, "warm")
    assert got.resident == 1.0 and min(_blob_fractions(moe)) == 1.0


def test_the_worker_puts_back_a_warm_state_reclaim_took_and_the_run_says_so(moe, tmp_path, capsys):
    def reclaimed(config):  # the runner verified warm; then reclaim takes the model before the worker looks
        evict_file_pages(moe.path)
        return run_worker(config, cache=cache_request("warm"))

    (result,) = measure_with(reclaimed, [RunConfig(moe.path, "experts", {"upload": "pageable"})], runs=1,
                             cache="warm", ledger=tmp_path / "l.sqlite", lock_dir=tmp_path / "locks")
    run = result.runs[0]
    recheck = run.report.cache_recheck
    assert run.resident_before == 1.0 and recheck is not None and recheck.seen < 0.05 and recheck.now == 1.0
    assert recheck.moved_bytes >= os.path.getsize(moe.path) - 2 * PAGE_SIZE and run.cache_reached
    n = len(pack_blobs(moe)[0])
    assert _blob_fact(run.engaged) == f"blob_zero_copy: {n}/{n} blobs — ON" and run.verified
    assert "1/1 runs: warm decayed before the load window" in result.notes and result.cache == "warm"
    report_results([result], None, True, True)  # what `workbench run` prints: on stderr, in every mode
    assert "note: 1/1 runs: warm decayed before the load window" in capsys.readouterr().err


def test_a_state_the_worker_could_not_put_back_is_not_reached(moe, tmp_path):
    lost = CacheRecheck("warm", seen=0.31, now=0.62, moved_bytes=5 << 20, threshold=0.98)

    def fake(config):
        return Outcome(pid=1, load_s=0.01, wall_s=0.5, bytes=1, report=WorkerReport(cache_recheck=lost))

    (result,) = measure_with(fake, [RunConfig(moe.path, "pread")], runs=1, cache="warm",
                             ledger=tmp_path / "l.sqlite", lock_dir=tmp_path / "locks")
    run = result.runs[0]
    assert run.resident_before == 1.0 and run.cache_reached is False
    assert run.report.cache_error == lost.line() and "still 62.0%: not warm at the window" in lost.line()
    assert result.cache.startswith("asis(unreachable: warm, 1/1 runs; warm decayed before the load window")


def test_the_worker_drops_a_cold_model_again_that_came_back(moe):
    warm_file(moe.path)  # something read the model after the runner evicted it
    config = {"file": moe.path, "strategy": "pread", "files": [moe.path], "cache": cache_request("cold")}
    report = run_load(config)
    recheck = report.cache_recheck
    assert recheck is not None and recheck.seen == 1.0 and recheck.now <= 0.02 and recheck.reached
    assert recheck.moved_bytes >= os.path.getsize(moe.path) - PAGE_SIZE
    assert report.costs.page_cache_before_bytes <= 0.02 * os.path.getsize(moe.path)  # the window opened cold
    assert WorkerReport.from_json(report.to_json()).cache_recheck == recheck
    assert "cold decayed before the load window: 100.0% resident" in recheck.line()
