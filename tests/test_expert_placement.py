"""Placement math and the boundary-page release rule, checked against the second write-up's numbers."""
import pytest

from workbench.expert import (
    pages_fully_covered,
    pages_touched,
    plan_blob,
    plan_placements,
    releasable_pages,
)
from workbench.formats.index import ExpertBlob

PAGE = 4096


def blob(first: int, stride: int, n: int = 4, layer: int = 0) -> ExpertBlob:
    slices = tuple((first + e * stride, stride) for e in range(n))
    return ExpertBlob(layer, "ffn_up_exps", n, stride, True, slices, ("blk.0.ffn_up_exps.weight",))


def test_page_multiple_stride_with_off_boundary_offset_is_placed():
    # the write-up's model: every expert offset a constant 1152 B past a page boundary
    p = plan_blob(blob(10 * PAGE + 1152, 216 * PAGE))
    assert p.placed and p.remainder == 1152
    # the reservation fits the last expert's enclosing aligned window
    last_end_in_buffer = p.remainder + 4 * 216 * PAGE
    assert p.reserve >= -(-last_end_in_buffer // PAGE) * PAGE


def test_non_page_multiple_stride_declines_with_reason():
    p = plan_blob(blob(1152, 216 * PAGE + 32))
    assert not p.placed and "not a multiple" in p.reason


def test_remainder_below_kernel_alignment_declines():
    p = plan_blob(blob(PAGE + 32, 2 * PAGE))
    assert not p.placed and "under-align" in p.reason


def test_page_aligned_blob_is_placed_with_zero_remainder():
    p = plan_blob(blob(8 * PAGE, 2 * PAGE))
    assert p.placed and p.remainder == 0


def test_report_on_partial_inert():
    good, bad = blob(1152, 2 * PAGE), blob(1152, 2 * PAGE + 64, layer=1)
    assert str(plan_placements([good, good])[1]).startswith("odirect-zero-copy ON — 2/2")
    assert plan_placements([good, bad])[1].state == "PARTIAL"
    report = plan_placements([bad])[1]
    assert report.state == "INERT" and "0/1" in str(report) and "not a multiple" in str(report)
    assert plan_placements([])[1].state == "INERT"


def test_bad_block_size_rejected():
    with pytest.raises(ValueError):
        plan_blob(blob(0, PAGE), block=3000)


def test_shifted_slice_touches_145_pages_but_covers_143():
    # write-up: "commit covers 145 pages per slice, release covers 143"
    addr, n = 7 * PAGE + 1152, 144 * PAGE
    assert len(pages_touched(addr, n)) == 145
    assert len(pages_fully_covered(addr, n)) == 143


def test_leak_per_turn_matches_the_write_up():
    addr, n = 7 * PAGE + 1152, 144 * PAGE
    leaked = len(pages_touched(addr, n)) - len(pages_fully_covered(addr, n))
    assert leaked * PAGE * 5200 / 2**20 == pytest.approx(40.6, abs=0.1)  # "~41 MiB a turn"


def test_boundary_pages_released_only_when_neighbour_gone():
    addr, n = 7 * PAGE + 1152, 144 * PAGE
    assert releasable_pages(addr, n, True, True) == pages_fully_covered(addr, n)
    assert releasable_pages(addr, n, False, False) == pages_touched(addr, n)
    left_live = releasable_pages(addr, n, True, False)
    assert left_live.start == 8 and left_live.stop == pages_touched(addr, n).stop


def test_aligned_slice_rule_is_exact_either_way():
    addr, n = 3 * PAGE, 5 * PAGE
    for left in (True, False):
        for right in (True, False):
            assert releasable_pages(addr, n, left, right) == range(3, 8)


def test_slice_inside_one_page_is_never_released_while_a_neighbour_lives():
    assert len(releasable_pages(PAGE + 100, 200, True, False)) == 0
    assert len(releasable_pages(PAGE + 100, 200, False, True)) == 0
    assert list(releasable_pages(PAGE + 100, 200, False, False)) == [1]
    assert len(pages_touched(0, 0)) == 0


def test_report_is_an_engaged_fact():
    fact = plan_placements([blob(1152, 2 * PAGE + 64)])[1].fact
    assert fact.state == "INERT" and fact.done == 0 and fact.total == 1 and "not a multiple" in fact.note


def test_uneven_spacing_says_so_and_reversed_experts_reserve_the_whole_span():
    uneven = ExpertBlob(0, "up", 3, 0, False, ((1152, PAGE), (1152 + 2 * PAGE, PAGE), (1152 + 7 * PAGE + 64, PAGE)), ())
    assert "uneven" in plan_blob(uneven).reason
    # experts stored in reverse order: the span starts at the lowest offset, not at expert 0
    rev = ExpertBlob(0, "up", 4, 2 * PAGE, True, tuple((1152 + e * 2 * PAGE, 2 * PAGE) for e in (3, 2, 1, 0)), ())
    assert rev.span == (1152, 1152 + 8 * PAGE) and rev.offset == 1152
    assert plan_blob(rev).reserve >= 8 * PAGE + 1152
