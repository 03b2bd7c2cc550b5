"""Staging and readers sized to the load, the usable cores and the available memory (upload/staging_plan.py)."""
from __future__ import annotations

import pytest

from workbench.upload.staging_plan import HUGE, MiB, fit_warm, usable_cores


def test_readers_never_outnumber_the_usable_cores():
    fit = fit_warm(8 << 30, 16, 8 * MiB, spare=4, cores=2, memory=64 << 30)
    assert fit.readers == 2 and "2 usable cores" in fit.why
    assert fit_warm(8 << 30, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30).readers == 16


def test_a_small_load_gets_fewer_readers_and_smaller_windows_of_whole_huge_pages():
    fit = fit_warm(64 * MiB, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30)
    assert fit.readers == 4 and "at >= 16 MiB a reader" in fit.why  # 64 MiB / 16 MiB a reader
    assert fit.window == 4 * MiB and fit.window % HUGE == 0  # about 4 windows a reader
    big = fit_warm(16 << 30, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30)
    assert (big.readers, big.window, big.why) == (16, 8 * MiB, "")  # a large load: as asked
    tiny = fit_warm(3 * MiB, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30)
    assert tiny.readers == 1 and tiny.window == HUGE  # never below one huge page


def test_windows_smaller_than_a_huge_page_stay_as_asked():
    assert fit_warm(64 * MiB, 3, 1 * MiB, spare=4, cores=16, memory=64 << 30).window == 1 * MiB


def test_staging_stays_under_an_eighth_of_the_available_memory():
    fit = fit_warm(8 << 30, 16, 8 * MiB, spare=4, cores=16, memory=256 * MiB)  # room: 32 MiB
    assert fit.window == HUGE and fit.readers == 12 and (fit.readers + 4) * fit.window <= 32 * MiB
    assert "within 1/8 of the 256 MiB available" in fit.why
    assert fit_warm(8 << 30, 16, 8 * MiB, spare=4, cores=16, memory=1 * MiB).readers == 1  # at least one


def test_usable_cores_follow_the_affinity_mask(monkeypatch: pytest.MonkeyPatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert usable_cores() == 3


def test_more_than_eight_readers_only_at_one_per_crowd_bytes() -> None:
    # H200, 2026-12-03 14:20 (n=6): 8 readers against 16 were 1.56x at 256 MiB, 1.13x at 1 GiB, level at 2 GiB.
    def readers(total: int, crowd: int = 128 * MiB) -> int:
        return fit_warm(total, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30, crowd=crowd).readers

    assert [readers(n * MiB) for n in (64, 256, 1024, 2048, 16384)] == [4, 8, 8, 16, 16]
    assert readers(1536 * MiB) == 12 and readers(256 * MiB, crowd=0) == 16  # 0: off
    fit = fit_warm(256 * MiB, 16, 8 * MiB, spare=4, cores=16, memory=64 << 30, crowd=128 * MiB)
    assert "8 of 16 readers (256 MiB: more than 8 readers only at one per 128 MiB)" in fit.why
    assert fit_warm(256 * MiB, 4, 8 * MiB, spare=4, cores=16, memory=64 << 30, crowd=128 * MiB).readers == 4
