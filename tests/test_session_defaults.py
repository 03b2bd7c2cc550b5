"""Defaults that show something, the warnings when a session cannot, the leak against its bound, and
fio-style steady state."""
from __future__ import annotations

import math

import pytest

from workbench.expert.session import ExpertSession, SessionConfig
from workbench.expert.session_defaults import default_cache_bytes, default_k, session_warnings
from workbench.expert.session_summary import growth_line, steady_line
from workbench.expert.steady import drift_after, relative_slope_pct, steady_from
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def moe64(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)


def session(index, turns, tokens, **kw):
    with ExpertSession(index, HostDevice(), SessionConfig(turns=turns, tokens=tokens, **kw)) as s:
        list(s.turns())
        return s.facts, s.report()


@pytest.mark.parametrize("n,k", [(1, 1), (4, 1), (8, 2), (16, 4), (64, 8), (128, 8)])
def test_default_k_is_a_quarter_of_the_experts_up_to_eight(n, k):
    assert default_k(n) == k


def test_default_session_on_a_default_synth_model_hits_and_evicts(synth_model):
    index = synth_model("gguf", "moe")  # `synth --layout moe` with its defaults: 8 experts, alignment 32
    facts, report = session(index, 6, 8)
    s = report.summary
    assert facts.experts_per_token == 2 and facts.cache_bytes < facts.expert_bytes
    assert facts.cache_bytes >= 2 * facts.working_set_bytes
    assert s.hit_rate > 0.2 and s.evictions > 0  # it hits, and still has to read and evict
    assert not any("never hit" in w for w in facts.warnings)


def test_warnings_say_when_a_session_cannot_show_anything(moe64):
    facts, report = session(moe64, 3, 4, cache_mib=0.3, experts_per_token=4, placement="bounce")
    assert any("can never hit" in w for w in facts.warnings)
    assert any("no boundary pages" in w for w in facts.warnings)  # bounce slots sit on page boundaries
    assert report.summary.hits == 0  # and indeed it never does
    facts, _ = session(moe64, 1, 1, cache_mib=64, experts_per_token=4)
    assert any("holds every expert" in w for w in facts.warnings)
    assert session_warnings(budget=10, working_set=5, expert_bytes=100, policy="lru", leak_bound=3,
                            placement="inplace") == ()
    assert default_cache_bytes(100, 10) == 50 and default_cache_bytes(100, 40) == 80 and default_cache_bytes(100, 60) == 100


def test_the_leak_grows_toward_its_bound_and_never_past_it(moe64):
    facts, report = session(moe64, 8, 4, cache_mib=0.6, experts_per_token=4, boundary_release="off")
    s = report.summary
    bound = facts.leak_bound_pages
    assert bound > 0 and s.leak_bound_pages == bound
    pages = [t.unreleased_pages for t in report.turns]
    assert all(0 < p <= bound for p in pages) and pages == sorted(pages)
    assert s.leak_of_bound == pytest.approx(pages[-1] / bound) and s.leak_of_bound > 0.5
    assert s.leak_half_turn == next(t.turn for t in report.turns if 2 * t.unreleased_pages >= bound)
    assert f"of the {bound:,} the model can leak" in growth_line(s)
    _, on = session(moe64, 8, 4, cache_mib=0.6, experts_per_token=4, boundary_release="on")
    assert on.summary.unreleased_pages_last == 0 and on.summary.leak_of_bound == 0


def test_steady_state_is_fios_slope_test():
    ramp = [10, 20, 30, 40, 50, 50, 50.5, 49.8, 50.2, 50, 50.1]
    assert steady_from(ramp, window=4, slope_pct=2) == 4
    assert steady_from(list(range(1, 30)), window=5, slope_pct=2) is None  # a ramp that never settles
    assert steady_from([5, 5], window=5) is None  # shorter than a window: cannot tell
    assert relative_slope_pct([0, 0, 0]) == 0 and relative_slope_pct([1, 2, 3]) == pytest.approx(50)


def test_steady_means_every_later_window_holds_still():
    drifting = [10.0] * 10 + [9.7, 9.4, 9.1, 8.8, 8.5]  # flat, then tok/s falls 15 % by the end
    assert relative_slope_pct(drifting[:5]) == 0  # its first window passes: the old rule said "from turn 0"
    assert steady_from(drifting, window=5, slope_pct=2) is None
    dip = [10.0] * 6 + [8, 6, 8] + [10.0] * 8  # moves mid-session, then holds still again
    assert steady_from(dip, window=5, slope_pct=2) == 9  # after the last window that moved
    assert steady_from([10.0] * 8, window=5, slope_pct=2) == 0


def _summary(rates: list[float], hit_rates: list[float] | None = None):
    from workbench.expert.session_records import SessionFacts, TurnRecord
    from workbench.expert.session_summary import summarize

    facts = SessionFacts("inplace", "", "ON", "pread", "", "on", "lru", 1, 1, 1, "synthetic", "", "host", False)
    hits = hit_rates or [0.5] * len(rates)
    records = [TurnRecord(turn=i, tokens=10, bytes_read=0, hits=5, misses=5, evictions=0, minflt=0, majflt=0,
                          accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=0, seconds=10 / r, tokens_per_s=r,
                          hit_rate=h) for i, (r, h) in enumerate(zip(rates, hits))]
    return summarize(records, facts, window=5, slope_pct=2.0)


def test_a_session_whose_tok_s_drifts_is_not_steady_and_says_so():
    s = _summary([10.0] * 10 + [9.7, 9.4, 9.1, 8.8, 8.5])
    assert s.steady_tokens_per_s_turn is None and s.steady_hit_rate_turn == 0
    line = steady_line(s)
    assert line.startswith("tok/s not steady (the last 5-turn window still moves more than 2 % a turn)"), line
    assert "hit rate steady from turn 0" in line and "tok/s steady" not in line
    held = _summary([10.0] * 6 + [8, 6, 8] + [10.0] * 8)
    assert held.steady_tokens_per_s_turn == 9
    assert steady_line(held).startswith("tok/s steady from turn 9, hit rate from turn 0 (every 5-turn window "
                                        "from there within 2 % of its mean a turn)")
    assert "fewer than one 5-turn window" in steady_line(_summary([10.0] * 3))


def test_drift_after_steady_state_is_large_and_clear_of_noise():
    flat = [100 + (-1) ** i for i in range(20)]
    assert drift_after(flat, 0) is None
    creeping = [100 + 0.8 * i for i in range(20)]  # +15 % over the span
    assert drift_after(creeping, 0) == pytest.approx(15.2 / (100 + 7.6) * 100, rel=0.01)
    noisy = [100, 130, 80, 125, 85, 120, 90, 118]  # big swings, no trend: not a drift
    assert drift_after(noisy, 0) is None
    assert drift_after([1, 2, 3], 0) is None


def test_a_long_session_summary_finds_the_steady_state_and_the_leak_drift(moe64):
    # a cache that hits 4-20 % of the time (a 0.6 MiB one hits once in 12 turns, and that one hit is a move)
    facts, report = session(moe64, 12, 6, cache_mib=2.0, experts_per_token=4, boundary_release="off",
                            steady_window=4, steady_slope_pct=50.0)
    s = report.summary
    assert s.steady_hit_rate_turn is not None and s.steady_tokens_per_s_turn is not None
    assert "tok/s steady from turn" in steady_line(s)
    start = max(s.steady_hit_rate_turn, s.steady_tokens_per_s_turn)
    # still climbing after steady state, with turns enough after it to tell (drift_after needs 4; a
    # steady state declared late — tok/s under a loaded machine — leaves fewer): the leak is what drifts
    if s.leak_of_bound < 0.99 and len(report.turns) - start >= 4:
        assert "unreleased_pages" in s.drift and s.drift["unreleased_pages"] > 0
    long_records = [len(str(t.to_json())) for t in report.turns]
    # a turn stays small: 10,000 tokens in 100 turns is ~100 such rows. Since issue 34 a turn also carries
    # its prefetch and miss-path counters and its tokens' times (two floats a token: 6 tokens here)
    assert max(long_records) < 3000
    assert not math.isnan(s.tokens_per_s)
