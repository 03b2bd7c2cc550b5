"""Route-ahead prefetch: predictors named and scored right, bytes read ahead and never used counted
against a replay of the same predictor, the routed lookups unchanged by any predictor, and the A/B
over prefetchers on the host backend."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert.prefetch import PrefetchTally, check_prefetch, parse_prefetch, precision_recall
from workbench.expert.prefetch.predictors import DegradedOracle, Popularity, PreviousToken, make_predictor
from workbench.expert.routing import RoutingTrace, save_trace, synthetic_trace
from workbench.expert.session import ExpertSession, SessionConfig
from workbench.expert.session_config import check_config
from workbench.ledger import Ledger
from workbench.upload.host import HostDevice

DECIDED = ("hits", "misses", "bytes_read", "evictions", "miss_fetched")  # miss_fetched: the miss server's count


@pytest.fixture(scope="module")
def moe64(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def _trace(experts: np.ndarray, layers=(0, 1), n=64) -> RoutingTrace:
    experts = np.ascontiguousarray(experts, dtype=np.int32)
    experts.setflags(write=False)
    return RoutingTrace(experts, tuple(layers), n, "hand-made")


def _session(index, **kw):
    cfg = SessionConfig(**({"turns": 3, "tokens": 4, "cache_mib": 2, "experts_per_token": 4, "lanes": 2,
                            "overlap": True, "verify_end": True} | kw))
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        s.finish_checks()
        return records, s.report(), s


# --- scoring ------------------------------------------------------------------------------------------
def test_precision_and_recall_are_counted_from_hand_made_cases():
    t = PrefetchTally()
    t.score([1, 2, 3], [2, 3])  # 2 right of 3 named; 2 routed
    t.score([], [0, 5])  # nothing named: 2 routed, none right
    t.score([4, 4, 7], [7, 9])  # a name given twice counts once: 1 right of 2 named
    assert (t.prefetch_named, t.prefetch_right, t.prefetch_routed) == (5, 3, 6)
    assert precision_recall(5, 3, 6) == (0.6, 0.5)
    assert precision_recall(0, 0, 2) == (None, 0.0)  # nothing named: no precision, not a zero


def test_previous_and_popularity_name_what_they_were_told():
    prev = PreviousToken()
    assert list(prev.predict(0, 1)) == []
    prev.observe(0, 1, [3, 5])
    assert list(prev.predict(1, 1)) == [3, 5] and list(prev.predict(1, 0)) == []
    trace = _trace(np.array([[[1, 2], [0, 1]], [[2, 3], [0, 1]], [[2, 1], [0, 4]]]))
    seen = Popularity(trace, 2, "seen")
    assert seen.predict(0, 0) == []  # nothing routed yet: nothing named
    for t in range(3):
        seen.observe(t, 0, trace.experts[t, 0])
    assert seen.predict(3, 0) == [2, 1]  # 2 routed 3 times, 1 twice, 3 once
    assert Popularity(trace, 3, "seen").predict(0, 1) == []
    ahead = Popularity(trace, 3, "trace")  # the whole trace counted ahead: 0 and 1 three times, then 4
    assert ahead.predict(0, 1) == [0, 1, 4]


def test_the_oracle_is_the_routing_at_one_and_degrades_to_what_was_asked():
    rng = np.random.default_rng(3)
    experts = np.stack([np.stack([rng.permutation(64)[:4] for _ in range(2)]) for _ in range(3000)])
    trace = _trace(experts)
    exact = DegradedOracle(trace, 1.0, 1.0, seed=0)
    assert all(sorted(exact.predict(t, 1)) == sorted(experts[t, 1]) for t in range(50))
    tally = PrefetchTally()
    oracle = DegradedOracle(trace, 0.9, 0.8, seed=5)
    for t in range(3000):
        tally.score(oracle.predict(t, 0), experts[t, 0])
    p, r = precision_recall(tally.prefetch_named, tally.prefetch_right, tally.prefetch_routed)
    assert r == pytest.approx(0.8, abs=0.02) and p == pytest.approx(0.9, abs=0.02)  # 12,000 routed: ±0.01 is 2σ
    with pytest.raises(ParamError, match="needs 76.00 wrong experts a layer, but 60 of 64"):
        DegradedOracle(trace, 0.05, 1.0, seed=0)


def test_the_oracle_is_seeded():
    trace = _trace(np.tile(np.array([[[0, 1], [2, 3]]]), (20, 1, 1)))
    draws = lambda seed: [DegradedOracle(trace, 0.5, 0.5, seed).predict(t, 0) for t in range(20)]  # noqa: E731
    assert draws(1) == draws(1) and draws(1) != draws(2)


@pytest.mark.parametrize("text,match", [("psychic", "not one of"), ("oracle:precision=0", r"\(0, 1\]"),
                                        ("oracle:recall=1.5", r"\[0, 1\]"), ("oracle:accuracy=1", "known: precision"),
                                        ("popularity:n=0", "n must be"), ("popularity:from=future", "from must"),
                                        ("previous:n=2", "known: none"), ("oracle:seed=x", "expected int")])
def test_bad_prefetch_texts_are_one_line(text, match):
    with pytest.raises(ParamError, match=match):
        parse_prefetch(text)


def test_a_predictor_needs_overlap_and_route_or_none_do_not():
    with pytest.raises(ParamError, match="needs --overlap"):
        check_prefetch("previous", overlap=False)
    assert check_prefetch("none", overlap=False).name == "none" and not parse_prefetch("route").predicts
    with pytest.raises(ParamError, match="needs --overlap"):
        check_config(SessionConfig(turns=1, tokens=1, prefetch="oracle:recall=0.5"))


# --- in a session ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("prefetch", ["none", "previous", "popularity", "popularity:from=trace",
                                      "oracle:precision=0.5,recall=0.7"])
def test_routed_lookups_are_the_same_whatever_the_predictor(moe64, prefetch):
    records, report, _ = _session(moe64, prefetch=prefetch)
    per_turn = 4 * 2 * 4 * 3  # tokens x layers x k x blobs a layer
    assert [r.hits + r.misses for r in records] == [per_turn] * 3
    assert report.summary.verified_slices > 0  # every turn's last layer and the cache, byte-exact
    assert all(len(r.token_s) == 4 for r in records)


def test_the_exact_oracle_through_the_predictor_decides_like_route(moe64):
    route, _, _ = _session(moe64)
    oracle, report, _ = _session(moe64, prefetch="oracle")
    assert [[getattr(r, k) for k in DECIDED] for r in oracle] == [[getattr(r, k) for k in DECIDED] for r in route]
    s = report.summary
    assert (s.prefetch_precision, s.prefetch_recall, s.prefetch_unused_bytes) == (1.0, 1.0, 0)
    assert all(r.prefetch_named < 0 for r in route)  # route runs no predictor: -1, not a perfect score


def test_previous_is_scored_as_a_brute_force_count_over_the_trace(moe64, tmp_path):
    trace = synthetic_trace(12, (0, 1), 64, 4, distribution="zipf", zipf_s=1.5, seed=4)
    save_trace(trace, tmp_path / "t.csv")
    records, report, _ = _session(moe64, prefetch="previous", trace=str(tmp_path / "t.csv"), experts_per_token=None)
    named = right = routed = 0
    for t in range(12):
        for i in range(2):
            if t % 4 == 0 and i == 0:
                continue  # a turn's first layer is never asked: nothing is staged across a turn's end
            guess = set(trace.experts[t - 1, i].tolist()) if t else set()
            truth = set(trace.experts[t, i].tolist())
            named, right, routed = named + len(guess), right + len(guess & truth), routed + len(truth)
    s = report.summary
    assert (s.prefetch_named, s.prefetch_right, s.prefetch_routed) == (named, right, routed)
    assert s.prefetch_precision == pytest.approx(right / named) and s.prefetch_recall == pytest.approx(right / routed)


def test_bytes_read_ahead_and_unused_match_a_replay_of_the_predictor(moe64, tmp_path):
    """Every token routes the same experts; the oracle adds wrong ones. With a cache that holds every
    expert nothing is evicted, so each wrong expert is read once, the first time it is named."""
    fixed = np.array([3, 17, 40, 41])
    experts = np.tile(fixed, (12, 2, 1))
    trace = _trace(experts)
    save_trace(trace, tmp_path / "fixed.csv")
    records, report, session = _session(moe64, prefetch="oracle:precision=0.5,recall=1,seed=7", cache_mib=64,
                                        trace=str(tmp_path / "fixed.csv"), experts_per_token=None)
    replay, read, right_bytes = DegradedOracle(trace, 0.5, 1.0, seed=7), set(), 0
    blobs = {layer: [b for b in moe64.blobs if b.layer == layer] for layer in (0, 1)}
    unused = 0
    for t in range(12):
        for i in range(2):
            if t % 4 == 0 and i == 0:
                continue
            for e in replay.predict(t, i):
                if (i, e) in read or (e in fixed and t > 0):
                    continue  # live already: pinned, not read
                read.add((i, e))
                nbytes = sum(b.slices[e][1] for b in blobs[i])
                if e in fixed:
                    right_bytes += nbytes
                else:
                    unused += nbytes
    s = report.summary
    assert s.prefetch_unused_bytes == unused > 0
    assert s.prefetch_bytes == unused + right_bytes
    assert s.prefetch_never_used_bytes == 0 and s.prefetch_idle_bytes == unused  # nothing evicted: all still there
    blobs_a_layer = 3
    assert session.cache.counters().misses - sum(r.misses for r in records) == blobs_a_layer * len(
        [1 for (i, e) in read if e not in fixed])  # read ahead unused: admitted, never a routed miss


def test_entries_read_ahead_and_evicted_unused_are_counted_once(moe64, tmp_path):
    experts = np.tile(np.array([3, 17, 40, 41]), (24, 2, 1))
    save_trace(_trace(experts), tmp_path / "fixed.csv")
    records, report, _ = _session(moe64, turns=4, tokens=6, cache_mib=2, trace=str(tmp_path / "fixed.csv"),
                                  experts_per_token=None, prefetch="oracle:precision=0.2,recall=1,seed=1")
    s = report.summary
    # every wrong expert is never routed: each read of one ends evicted unused, or still live at the end
    assert s.prefetch_never_used_bytes > 0
    assert s.prefetch_unused_bytes == s.prefetch_never_used_bytes + s.prefetch_idle_bytes
    assert s.prefetch_late_bytes == 0  # a wrong expert is never routed here
    assert s.prefetch_dropped >= 0 and [r.hits + r.misses for r in records] == [6 * 2 * 4 * 3] * 4


def test_make_predictor_takes_the_sessions_seed_unless_given():
    trace = _trace(np.tile(np.array([[[0, 1], [2, 3]]]), (10, 1, 1)))
    a = make_predictor(parse_prefetch("oracle:precision=0.5,recall=0.5"), trace, seed=9)
    b = make_predictor(parse_prefetch("oracle:precision=0.5,recall=0.5,seed=9"), trace, seed=0)
    assert [a.predict(t, 0) for t in range(10)] == [b.predict(t, 0) for t in range(10)]


# --- the command line, the A/B, the ledger --------------------------------------------------------------
def test_an_oracle_this_model_cannot_have_is_one_line_before_anything_is_recorded(moe64, tmp_path):
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, ["session", moe64.path, "--turns", "1", "--tokens", "1", "--overlap",
                                       "--prefetch", "oracle:precision=0.01", "--ledger", str(ledger)])
    assert result.exit_code == 2 and "needs" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not ledger.exists()


def test_ab_over_prefetchers_on_the_host(moe64, tmp_path):
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, [
        "session", moe64.path, "--turns", "3", "--tokens", "3", "--cache-mib", "2", "--experts-per-token", "4",
        "--lanes", "2", "--overlap", "--ab", "prefetch=none", "--ab", "prefetch=previous",
        "--ab", "prefetch=oracle:precision=0.9,recall=0.9", "--rounds", "2", "--ledger", str(ledger), "--json"],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert not [c for c in doc["checks"] if c.startswith("FAILED")], doc["checks"]
    metrics = {e["metric"] for e in doc["effects"]}
    assert {"token p50 ms", "token p90 ms", "token p99 ms", "token max ms", "stall ms/token", "stall p99 ms"} <= metrics
    p99 = [e for e in doc["effects"] if e["metric"] == "token p99 ms"]
    assert all("each cell's p99: n = 6 tokens; p99 is the slowest token" in e["caveat"] for e in p99)
    figures = {c["arm"]: c["figures"] for c in doc["cells"]}
    assert figures[0]["precision"] == -1 and figures[0]["recall"] == 0.0  # none names nothing
    assert 0.0 < figures[2]["precision"] <= 1.0 and figures[2]["tokens"] == 6  # turns 2 and 3 of 3 tokens
    with Ledger(ledger) as led:
        turns = led.turns()
    extra = turns["extra"].iloc[-1]
    assert len(extra["token_s"]) == 3 and extra["prefetch_named"] >= 0
    md = tmp_path / "ab.md"
    CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "export", "--markdown", str(md)])
    text = md.read_text()
    assert "per token ms p50" in text and "prefetch precision" in text


def test_session_text_says_the_percentiles_and_what_was_prefetched(moe64, tmp_path):
    result = CliRunner().invoke(main, ["session", moe64.path, "--turns", "2", "--tokens", "3", "--cache-mib", "2",
                                       "--experts-per-token", "4", "--lanes", "2", "--overlap", "--prefetch",
                                       "previous", "--ledger", str(tmp_path / "l.sqlite")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "per token ms p50" in out and "(n = 6 tokens; p99 is the slowest token" in out
    assert "prefetch previous (the previous token's experts" in out and "prefetch precision" in out
    with Ledger(tmp_path / "l.sqlite") as led:
        assert " overlap prefetch=previous " in led.attempts()["label"].iloc[0]  # named in the ledger's tables


@pytest.mark.parametrize("prefetch", ["oracle:precision=0.3,recall=0.8,seed=2", "popularity:n=12"])
def test_every_byte_read_ahead_unused_is_evicted_hit_later_or_still_there(moe64, prefetch):
    """unused = never used + late + idle, whatever routes when: Zipf routing, a cache of a few tokens."""
    records, report, _ = _session(moe64, turns=4, tokens=6, distribution="zipf", prefetch=prefetch)
    s = report.summary
    assert s.prefetch_unused_bytes > 0 and s.prefetch_late_bytes > 0 and s.prefetch_never_used_bytes > 0
    assert s.prefetch_unused_bytes == s.prefetch_never_used_bytes + s.prefetch_late_bytes + s.prefetch_idle_bytes


class _Scripted:
    """A predictor naming what it is told to, per (token, layer)."""

    description = "scripted"

    def __init__(self, names):
        self.names = names

    def predict(self, t, i):
        return self.names.get((t, i), ())

    def observe(self, t, i, experts):
        return None


class _FakeDecoder:
    """Just what PrefetchStage drives: one layer of one blob, a set for a cache, reads done at once."""

    def __init__(self, routing, capacity=None):
        from collections import Counter
        from concurrent.futures import Future
        from contextlib import nullcontext
        from types import SimpleNamespace

        self.routing, self.by_layer, self.pins, self.live = routing, {0: [0]}, Counter(), set()
        self.capacity = capacity
        self.trace = SimpleNamespace(layers=(0,))
        self.lanes = SimpleNamespace(wait=lambda handle: None)
        self.timed = lambda cause: nullcontext()
        done = Future()
        done.set_result(None)
        self.submit_read = lambda key, kind: done
        d = self

        class Cache:
            layouts = [SimpleNamespace(slice=lambda e: (0, 100))]
            __contains__ = lambda self, key: key in d.live  # noqa: E731

            def pin(self, key):
                d.pins[key] += 1

            def unpin(self, key):
                d.pins[key] -= 1

            def admit(self, key):
                if d.capacity is not None and len(d.live) >= d.capacity:  # evict one not in use, or refuse
                    victims = sorted(k for k in d.live if d.pins[k] == 0)
                    if not victims:
                        raise ParamError("cache", "budget", "every entry is in use")
                    d.live.discard(victims[0])
                d.live.add(key)
                d.pins[key] += 1
                return "pread"

            def complete(self, key, outcome, kind):
                return None
        self.cache = Cache()

    def route(self, t, i):
        return list(self.routing[t])

    def lookup(self, key):
        if key in self.live:
            self.pins[key] += 1
            return None
        return self.cache.admit(key)

    def land(self, plan):
        for key in plan.keys:
            self.pins[key] -= 1
        return []


@pytest.mark.parametrize("evicted,late,never", [(False, 100, 0), (True, 0, 100)])
def test_an_entry_read_ahead_for_another_layer_is_a_later_hit_or_was_never_used(evicted, late, never):
    from workbench.expert.cache import SliceKey
    from workbench.expert.prefetch import PrefetchStage

    d = _FakeDecoder({0: [1], 1: [2], 2: [5]})
    stage = PrefetchStage(_Scripted({(1, 0): [5]}))  # token 1 is staged expert 5; it routes 2
    stage.land(d, 0, 0, None)
    stage.land(d, 1, 0, stage.ahead(d, 1, 0))
    assert stage.tally.prefetch_unused_bytes == 100 and stage.unused_entries == 1
    if evicted:
        stage.land(d, 1, 0, None)  # the next layer settles the read: 5 is unpinned, an ordinary entry ...
        assert d.pins[SliceKey(0, 5)] == 0
        d.live.discard(SliceKey(0, 5))  # ... and the cache evicts it
    stage.land(d, 2, 0, None)  # token 2 routes 5
    stage.finish(d)
    t = stage.tally
    assert (t.prefetch_late_bytes, t.prefetch_never_used_bytes, t.prefetch_idle_bytes) == (late, never, 0)
    assert all(n == 0 for n in d.pins.values())  # every pin let go


def test_entries_staged_live_and_not_routed_make_room_for_the_routed_miss():
    from workbench.expert.prefetch import PrefetchStage

    d = _FakeDecoder({0: [1], 1: [3], 2: [5]}, capacity=2)
    stage = PrefetchStage(_Scripted({(2, 0): [1, 3]}))  # both live: pinned, not read
    stage.land(d, 0, 0, None)
    stage.land(d, 1, 0, None)
    stage.land(d, 2, 0, stage.ahead(d, 2, 0))  # 5 needs one of them evicted: they were not routed
    stage.finish(d)
    assert len(d.live) == 2 and all(n == 0 for n in d.pins.values())
