"""Per-token latency and stall percentiles: nearest-rank from known token times, what a p99 rests on,
the session summary's fields from the turns' raw times, and the decode loop's tokens adding up."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from workbench.expert.session import ExpertSession, SessionConfig
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import summarize
from workbench.records.token_tail import p99_caveat, tail, tail_fields, tail_line, tokens_above_p99
from workbench.upload.host import HostDevice


def test_percentiles_from_known_token_times():
    ten = tail([x / 1e3 for x in (7, 1, 9, 3, 5, 10, 2, 8, 4, 6)])  # 1..10 ms, shuffled
    assert ten.n == 10 and ten.ms() == pytest.approx({"p50": 5.0, "p90": 9.0, "p99": 10.0, "max": 10.0})
    many = tail(range(1, 201))  # 1..200: the 100th, 180th and 198th smallest
    assert (many.p50, many.p90, many.p99, many.max) == (100, 180, 198, 200)
    one = tail([0.25])
    assert (one.p50, one.p90, one.p99, one.max) == (0.25,) * 4
    assert tail([]) is None


@pytest.mark.parametrize("n", [1, 2, 7, 64, 99, 100, 101, 250, 1000])
def test_nearest_rank_is_numpys_inverted_cdf(n):
    values = np.random.default_rng(n).exponential(size=n)
    found = tail(values)
    assert (found.p50, found.p90, found.p99) == tuple(np.percentile(values, (50, 90, 99), method="inverted_cdf"))


def test_what_a_p99_rests_on():
    assert tokens_above_p99(64) == 1 and "p99 is the slowest token: fewer than 100" in p99_caveat(64)
    assert tokens_above_p99(200) == 3 and p99_caveat(200) == "n = 200 tokens; p99 rests on the slowest 3"
    assert p99_caveat(1000) == "n = 1000 tokens; p99 rests on the slowest 11"


def _turn(i: int, token_s=(), token_stall_s=()):
    return TurnRecord(turn=i, tokens=len(token_s) or 1, bytes_read=0, hits=0, misses=0, evictions=0, minflt=0,
                      majflt=0, accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=0, seconds=sum(token_s) or 1.0,
                      tokens_per_s=1.0, token_s=tuple(token_s), token_stall_s=tuple(token_stall_s))


def test_the_summary_takes_every_turns_tokens_not_the_turns_percentiles():
    # turn 0: nine fast tokens; turn 1: one slow one. Each turn's own p50 is 1 ms and 50 ms; over the session 1 ms.
    turns = [_turn(0, [0.001] * 9, [0.0] * 9), _turn(1, [0.050], [0.040])]
    s = summarize(turns, SessionFacts("", "", "", "", "", "", "", 0, 0, 0, "", "", "", False))
    assert s.token_n == 10 and s.token_p50_ms == pytest.approx(1.0) and s.token_p90_ms == pytest.approx(1.0)
    assert s.token_p99_ms == pytest.approx(50.0) and s.token_max_ms == pytest.approx(50.0)
    assert s.stall_p99_ms == pytest.approx(40.0) and s.stall_ms_per_token == pytest.approx(4.0)
    assert "p99 is the slowest token" in tail_line(s) and s.token_p99_note.startswith("n = 10 tokens; p99 is the slowest")
    old = tail_fields([SimpleNamespace()])  # turns recorded before tokens were: nothing, not zeros
    assert old["token_n"] == 0 and old["token_p99_ms"] is None and tail_line(old) == "per-token times not recorded"


def test_a_recorded_turn_keeps_its_tokens_through_json():
    turn = _turn(0, [0.001, 0.002], [0.0, 0.001])
    back = TurnRecord.from_json(turn.to_json())
    assert back == turn and isinstance(back.token_s, tuple)


@pytest.mark.parametrize("lanes,overlap", [(1, False), (2, True)])
def test_a_turns_tokens_add_up_to_its_time_and_its_stalls(synth_model, lanes, overlap):
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    cfg = SessionConfig(turns=2, tokens=5, cache_mib=2, experts_per_token=4, lanes=lanes, overlap=overlap)
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
    for r in records:
        assert len(r.token_s) == len(r.token_stall_s) == 5
        assert 0.8 * r.seconds <= sum(r.token_s) <= r.seconds  # the decode loop's time, token by token
        assert sum(r.token_stall_s) == pytest.approx(r.stall_read_s + r.stall_upload_s + r.stall_route_s, abs=1e-6)
        assert all(0 <= st <= t for st, t in zip(r.token_stall_s, r.token_s))


def test_the_ledger_and_the_notebook_show_a_sessions_percentiles():
    import pandas as pd

    from workbench.cli.notebooks.sessions import sessions_frame
    from workbench.ledger.sessions import session_lines

    extra = [{"token_s": [0.001] * 9, "token_stall_s": [0.0] * 9, "residual_s_per_token": 0.001},
             {"token_s": [0.050], "token_stall_s": [0.040], "residual_s_per_token": 0.001}]
    turns = pd.DataFrame({"attempt_id": ["a1", "a1"], "turn": [0, 1], "tokens": [9, 1], "evictions": [0, 0],
                          "unreleased_pages": [0, 0], "actual_anon_bytes": [0, 0], "accounted_bytes": [0, 0],
                          "minflt": [0, 0], "majflt": [0, 0], "tokens_per_s": [900.0, 20.0], "extra": extra})
    attempts = pd.DataFrame({"id": ["a1"], "label": ["long · m"], "environment": [{}]})
    row = sessions_frame(turns, attempts).iloc[0]
    assert (row["token p50 ms"], row["token p99 ms"], row["tokens (p99 rests on)"]) == (1.0, 50.0, 10)
    line = session_lines(attempts, turns)[0]
    assert "per token ms p50 1.00, p90 1.00, p99 50.00, max 50.00" in line and "n = 10 tokens" in line
