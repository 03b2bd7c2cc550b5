"""Ceilings: measured on a small scratch file, stored per host, and attached to attempts."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.ledger import Ledger
from workbench.measure.ceilings.bounds import bounding_ceiling, host_ceilings
from workbench.measure.ceilings.walls import measure_ceilings, thread_counts
from workbench.records import LoadPath

MiB = 1 << 20


def test_thread_counts_are_powers_of_two_up_to_the_limit() -> None:
    assert thread_counts(1) == [1]
    assert thread_counts(6) == [1, 2, 4]
    assert thread_counts(16) == [1, 2, 4, 8, 16]


def test_bounding_ceiling_picks_the_wall() -> None:
    walls = {"cold_read_buffered_1t": 1.0, "cold_read_direct_2t": 2.5, "page_cache_read_1t": 6.0,
             "page_cache_read_2t": 9.0, "h2d_cuda_pageable": 5.0, "h2d_cuda_pinned": 50.0,
             "h2d_host_pageable": 4.0}
    assert bounding_ceiling(walls, "cold", "cuda:1") == ("cold_read_direct_2t", 2.5)
    assert bounding_ceiling(walls, "warm", "cuda:1") == ("page_cache_read_2t", 9.0)  # pinned copy is faster
    assert bounding_ceiling(walls, "warm", "host-uma") == ("h2d_host_pageable", 4.0)  # copy is slower
    assert bounding_ceiling(walls, "warm", "hip") == ("page_cache_read_2t", 9.0)  # no hip copy measured
    assert bounding_ceiling(walls, None, "host") is None
    assert bounding_ceiling({}, "cold", "host") is None


def test_a_read_straight_into_host_memory_is_bounded_by_the_read_alone() -> None:
    # the ring on a host device reads into the buffers themselves: no copy follows, so no copy wall
    walls = {"page_cache_read_2t": 9.0, "h2d_host_pageable": 4.0, "h2d_host_pinned": 5.0}
    direct = LoadPath(readers=2, copy_from="none")
    assert bounding_ceiling(walls, "warm", "host", direct) == ("page_cache_read_2t", 9.0)
    staged = LoadPath(readers=2, copy_from="pinned")
    assert bounding_ceiling(walls, "warm", "host", staged) == ("h2d_host_pinned", 5.0)


def test_ceilings_land_in_the_ledger_and_bound_attempts(tmp_path: Path, isolated_cache: Path) -> None:
    from workbench.formats.synth import write_synthetic
    from workbench.measure import RunConfig, measure

    ledger = Ledger(tmp_path / "l.sqlite")
    report = measure_ceilings(tmp_path, devices=("host",), size=8 * MiB, threads=[1, 2], ledger=ledger,
                              lock_dir=tmp_path / "locks")
    names = {c.name for c in report.ceilings}
    assert {"page_cache_read_1t", "page_cache_read_2t", "memcpy", "h2d_host_pageable", "h2d_host_pinned",
            "h2d_host_registered"} <= names
    skipped = {n for n, _ in report.skipped}
    assert "cold_read_buffered_1t" in names or "cold_read" in skipped
    assert all(c.gbps > 0 and c.detail["bytes"] > 0 for c in report.ceilings)
    assert not list(tmp_path.glob(".wb-ceilings-*"))  # the scratch file is gone
    stored = host_ceilings(ledger)
    assert stored == pytest.approx({c.name: c.gbps for c in report.ceilings})

    model = tmp_path / "m.gguf"
    write_synthetic(model, format="gguf", layout="dense", size=512 << 10)
    (res,) = measure([RunConfig(str(model), "pread")], runs=1, cache="warm", ledger=ledger,
                     lock_dir=tmp_path / "locks")
    path = res.runs[0].report.load.path
    assert path == LoadPath(readers=1, copy_from="pageable", direct=False)
    want = bounding_ceiling(stored, "warm", "host", path)
    assert (res.ceiling_name, res.ceiling_gbps) == pytest.approx(want)
    assert res.ceiling_fraction == pytest.approx(res.stats.gbps / res.ceiling_gbps)
    assert ledger.attempt(res.attempt_id)["ceiling_name"] == res.ceiling_name


WALLS = {"cold_read_buffered_1t": 1.7, "cold_read_buffered_4t": 2.0, "cold_read_direct_1t": 1.3,
         "cold_read_direct_4t": 1.4, "page_cache_read_1t": 7.6, "page_cache_read_4t": 26.7,
         "page_cache_read_16t": 46.2, "h2d_cuda_pageable": 7.5, "h2d_cuda_pinned": 55.2,
         "h2d_cuda_registered": 53.8}  # the H200's walls, 2026-11-30


@pytest.mark.parametrize("state, path, want", [
    ("warm", None, ("page_cache_read_16t", 46.2)),  # no path: the optimistic bound
    ("warm", {"readers": 1, "copy_from": "pageable"}, ("h2d_cuda_pageable", 7.5)),  # pread
    ("warm", {"readers": 0, "copy_from": "mmap"}, ("h2d_cuda_pageable", 7.5)),  # borrowed mmap slices
    ("cold", {"readers": 0, "copy_from": "mmap"}, ("cold_read_buffered_4t", 2.0)),
    ("warm", {"readers": 1, "copy_from": "pinned"}, ("page_cache_read_1t", 7.6)),  # one reader, pinned
    ("warm", {"readers": 5, "copy_from": "pinned"}, ("page_cache_read_4t", 26.7)),  # nearest not above
    ("warm", {"readers": 16, "copy_from": "registered"}, ("page_cache_read_16t", 46.2)),
    ("cold", {"readers": 1, "direct": True}, ("cold_read_direct_4t", 1.4)),  # disk: best of its kind
    ("cold", {"readers": 1}, ("cold_read_buffered_4t", 2.0)),
    ("warm", {"readers": 1, "direct": True}, ("cold_read_direct_4t", 1.4)),  # O_DIRECT skips the cache
    ("cold", None, ("cold_read_buffered_4t", 2.0)),
    ("asis", {"readers": 1}, None),
])
def test_bounding_wall_follows_what_the_load_did(state, path, want) -> None:
    load_path = None if path is None else LoadPath.from_json(path)
    assert bounding_ceiling(WALLS, state, "cuda:0", load_path) == want


FILE_WALLS = {**WALLS, "cold_read_file_8t": 1.86, "cold_read_file_16t": 1.79, "page_cache_read_file_8t": 44.0,
              "page_cache_read_file_16t": 41.0}  # whole 8 GB file, profile run 1 (cold: below the 2 GiB region)


@pytest.mark.parametrize("state, path, want", [
    ("cold", {"readers": 8}, ("cold_read_file_8t", 1.86)),  # the whole file, not the faster region read
    ("cold", None, ("cold_read_file_8t", 1.86)),
    ("cold", {"readers": 1, "direct": True}, ("cold_read_direct_4t", 1.4)),  # O_DIRECT: its own wall
    ("warm", {"readers": 16, "copy_from": "pinned"}, ("page_cache_read_file_16t", 41.0)),
    ("warm", {"readers": 12, "copy_from": "pinned"}, ("page_cache_read_file_8t", 44.0)),
    ("warm", {"readers": 1, "copy_from": "pinned"}, ("page_cache_read_1t", 7.6)),  # no whole-file 1-reader wall
    ("warm", {"readers": 0, "copy_from": "registered"}, ("page_cache_read_file_8t", 44.0)),  # mmap register=1
    ("warm", None, ("page_cache_read_file_8t", 44.0)),
])
def test_whole_file_walls_bound_loads_of_that_file(state, path, want) -> None:
    load_path = None if path is None else LoadPath.from_json(path)
    assert bounding_ceiling(FILE_WALLS, state, "cuda:0", load_path) == want


def test_whole_file_reads_are_measured_cold_and_warm(tmp_path: Path) -> None:
    from workbench.io.pagecache import resident_fraction

    model = tmp_path / "m.bin"
    model.write_bytes(bytes(range(256)) * (12 * 4096 + 5))
    report = measure_ceilings(tmp_path, devices=(), size=4 * MiB, threads=[1], file=model, file_threads=[1, 2],
                              record=False, lock_dir=tmp_path / "locks")
    by_name = {c.name: c for c in report.ceilings}
    assert by_name["page_cache_read_file_2t"].detail["bytes"] == model.stat().st_size
    assert by_name["page_cache_read_file_1t"].detail["file"] == str(model)
    cold = {"cold_read_file_1t", "cold_read_file_2t"}
    assert cold <= set(by_name) or cold <= {n for n, _ in report.skipped}  # a cache that cannot be dropped
    assert resident_fraction(str(model)) == 1.0  # left warm
