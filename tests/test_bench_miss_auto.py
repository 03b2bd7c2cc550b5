"""benchmarks/bench/miss_auto.py: auto's tok/s over the better fixed arm of a --miss A/B, paired by round,
and the goal's verdict (within 5 %) from its interval; a file that is not an A/B document is one line, exit 2."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench"))

import miss_auto  # noqa: E402


def _doc(fetch, host, auto, probes=1, labels=("miss=fetch", "miss=host", "miss=auto")):
    arms = [{"label": lab} for lab in labels]
    cells = []
    for r in range(len(fetch)):
        for i, v in enumerate((fetch[r], host[r], auto[r])):
            summary = {"tokens": 24, "miss_probe_tokens": probes if i == 2 else -1, "miss_probe_ms": 5.0 if i == 2 else None}
            cells.append({"arm": i, "round": r, "figures": {"tok/s": v}, "summary": summary})
    return {"arms": arms, "cells": cells}


HOST = [200.0, 210.0, 190.0, 205.0, 195.0, 200.0]
FETCH = [40.0, 42.0, 38.0, 41.0, 39.0, 40.0]


def test_auto_beside_the_better_fixed_way_meets_the_goal():
    lines = miss_auto.auto_against_best(_doc(FETCH, HOST, [h * 0.99 for h in HOST]))
    assert "(miss=host)" in lines[1] and "0.99×" in lines[1] and "n = 6" in lines[1]
    assert "within 5 % met" in lines[1]
    assert "6 tokens of 144, 30.0 ms run the probed way over 6 cells" in lines[2]


def test_auto_below_the_goal_is_said_and_a_wide_interval_decides_nothing():
    assert "NOT met" in miss_auto.auto_against_best(_doc(FETCH, HOST, [h * 0.8 for h in HOST]))[1]
    noisy = [h * f for h, f in zip(HOST, (0.8, 1.1, 0.85, 1.15, 0.9, 1.05))]
    assert "neither shown nor refuted" in miss_auto.auto_against_best(_doc(FETCH, HOST, noisy))[1]
    fetch_best = miss_auto.auto_against_best(_doc(HOST, FETCH, [h * 0.99 for h in HOST]))
    assert "(miss=fetch)" in fetch_best[1] and "met" in fetch_best[1]


def test_arms_with_more_settings_are_matched_by_their_miss_way_and_the_rest_alike():
    labels = ("placement=pool miss=fetch", "miss=host placement=pool", "placement=pool miss=auto")
    lines = miss_auto.auto_against_best(_doc(FETCH, HOST, [h * 0.99 for h in HOST], labels=labels))
    assert "(miss=host placement=pool)" in lines[1] and "within 5 % met" in lines[1]
    assert "6 tokens of 144" in lines[2]
    unlike = ("placement=inplace miss=fetch", "placement=inplace miss=host", "placement=pool miss=auto")
    assert "nothing to place auto against" in miss_auto.auto_against_best(_doc(FETCH, HOST, HOST, labels=unlike))[1]


def test_a_file_that_is_not_an_ab_document_is_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    for text in ("not json", "{}", "[1, 2]", '{"arms": [], "cells": [{"arm": 3, "figures": {"tok/s": 1}}]}'):
        bad.write_text(text)
        assert miss_auto.main([str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(bad) in err[0]
    good = tmp_path / "ab.json"
    good.write_text(json.dumps(_doc(FETCH, HOST, HOST)))
    assert miss_auto.main([str(good)]) == 0 and "auto over the better fixed way" in capsys.readouterr().out
