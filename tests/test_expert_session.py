"""Long sessions: the boundary leak grows turn over turn with release off and never with it on, a
single short turn cannot tell them apart, uploads are byte-exact, and records serialize as promised."""
from __future__ import annotations

import json
import os

import pytest

from workbench.errors import ParamError, TraceError
from workbench.expert.routing import save_trace, synthetic_trace
from workbench.expert.session import ExpertSession, SessionConfig, run_session
from workbench.expert.session_records import (
    DECODE_TURN_KEYS,
    MEMORY_TURN_KEYS,
    MISS_KEYS,
    PRESSURE_KEYS,
    TURN_EXTRAS,
    PREFETCH_KEYS,
    TOKEN_KEYS,
    WALL_KEYS,
    TurnRecord,
)
from workbench.io.direct import direct_io_support
from workbench.upload.host import HostDevice

PAGE = 4096
ISSUE_KEYS = ["turn", "tokens", "bytes_read", "hits", "misses", "evictions", "minflt", "majflt",
              "accounted_bytes", "actual_anon_bytes", "unreleased_pages", "seconds", "tokens_per_s"]
# One-shot noise floor for the process's anonymous memory: what a single measurement could not
# distinguish from allocator churn. The long-session leak below must clear it; a short turn must not.
ONE_SHOT_NOISE = 256 << 10


@pytest.fixture(scope="module")
def moe64(synth_model):
    """An alignment-64 GGUF MoE (2 layers x 3 blobs x 64 experts of 9 pages, all off page boundaries)."""
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    assert all(b.offset % PAGE for b in index.blobs) and len({b.layer for b in index.blobs}) >= 2
    return index


def session(index, turns, tokens, **kw):
    cfg = SessionConfig(turns=turns, tokens=tokens, **({"cache_mib": 0.5, "experts_per_token": 2} | kw))
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        return records, s.report()


def test_leak_off_grows_every_turn_on_stays_zero(moe64):
    off, _ = session(moe64, 6, 4, boundary_release="off")
    on, _ = session(moe64, 6, 4, boundary_release="on")
    assert off[0].unreleased_pages > 0
    assert all(b.unreleased_pages > a.unreleased_pages for a, b in zip(off, off[1:])), \
        [r.unreleased_pages for r in off]
    assert all(r.unreleased_pages == 0 for r in on)
    # same routing, same cache decisions: only what the kernel got back differs
    assert [(r.hits, r.misses, r.evictions, r.bytes_read, r.accounted_bytes) for r in off] == \
           [(r.hits, r.misses, r.evictions, r.bytes_read, r.accounted_bytes) for r in on]
    # mincore over the cache's reservations: resident - accounted is exactly the unreleased pages
    assert all(r.resident_bytes - r.accounted_bytes == r.unreleased_pages * PAGE for r in off + on)


def test_leak_shows_in_the_process_anonymous_memory(moe64):
    off, _ = session(moe64, 6, 4, boundary_release="off")
    on, _ = session(moe64, 6, 4, boundary_release="on")
    growth = lambda rs: (rs[-1].actual_anon_bytes - rs[-1].accounted_bytes) - (rs[0].actual_anon_bytes - rs[0].accounted_bytes)  # noqa: E731
    leaked = (off[-1].unreleased_pages - off[0].unreleased_pages) * PAGE
    assert leaked > ONE_SHOT_NOISE
    assert growth(off) >= 0.75 * leaked, (growth(off), leaked)
    assert abs(growth(on)) < ONE_SHOT_NOISE, growth(on)


def test_a_single_short_turn_cannot_tell_them_apart(moe64):
    # A short fresh run, as the write-up's device runs were: the cache never fills, nothing is evicted,
    # so both builds hold the same pages and the leak has nothing to leak yet.
    short = {"cache_mib": 64, "experts_per_token": 2}
    (off,), _ = session(moe64, 1, 3, boundary_release="off", **short)
    (on,), _ = session(moe64, 1, 3, boundary_release="on", **short)
    assert off.evictions == on.evictions == 0
    assert off.unreleased_pages == on.unreleased_pages == 0
    assert off.resident_bytes - off.accounted_bytes == on.resident_bytes - on.accounted_bytes == 0
    assert abs((off.actual_anon_bytes - off.accounted_bytes) - (on.actual_anon_bytes - on.accounted_bytes)) \
        < ONE_SHOT_NOISE
    # ... while the same two builds, run long enough to evict, come apart (the test above)
    long_off, _ = session(moe64, 4, 4, boundary_release="off")
    assert long_off[-1].unreleased_pages * PAGE > ONE_SHOT_NOISE


@pytest.mark.parametrize("placement", ["inplace", "bounce", "aligned"])
def test_uploads_are_byte_exact(moe64, placement):
    _, report = session(moe64, 2, 3, placement=placement, verify=True)
    s = report.summary
    assert s.verified_slices == s.hits + s.misses == 2 * 3 * 2 * len(moe64.blobs)  # turns x tokens x k x blobs
    assert s.facts.placement == placement and s.facts.verify


def test_inplace_reads_copy_nothing_bounce_copies_everything(moe64, tmp_path):
    if not direct_io_support(moe64.path):
        pytest.skip("O_DIRECT not supported where the model lies")
    inplace, rep = session(moe64, 2, 3, placement="inplace")
    bounce, _ = session(moe64, 2, 3, placement="bounce")
    assert rep.summary.facts.placement_state == "ON" and rep.summary.facts.reader == "direct-inplace"
    assert sum(r.shift_copy_bytes for r in inplace) == 0
    assert [r.shift_copy_bytes for r in bounce] == [r.bytes_read for r in bounce] and bounce[0].bytes_read > 0


def test_alignment_32_model_runs_declined_and_says_why(synth_model):
    index = synth_model("gguf", "moe", alignment=32, size=3 << 20, experts=8)
    _, rep = session(index, 2, 2, cache_mib=0.3, verify=True)
    f = rep.summary.facts
    assert f.placement_state == "INERT" and "under-align" in f.placement_report
    assert rep.summary.unreleased_pages_last == 0  # declined blobs use whole-page slots: nothing shared


def test_json_is_the_issue_document(moe64):
    _, report = session(moe64, 2, 2)
    doc = json.loads(json.dumps(report.to_json()))
    assert list(doc) == ["turns", "summary"] and len(doc["turns"]) == 2
    keys = list(ISSUE_KEYS) + list(DECODE_TURN_KEYS) + list(MEMORY_TURN_KEYS) + list(TURN_EXTRAS) + list(PRESSURE_KEYS)
    keys += list(WALL_KEYS) + list(TOKEN_KEYS) + list(PREFETCH_KEYS) + list(MISS_KEYS)
    assert all(list(t) == keys for t in doc["turns"])  # the first issue's keys first, in order
    assert TurnRecord.from_json(report.turns[1].to_json()) == report.turns[1]
    old = {k: doc["turns"][0][k] for k in ISSUE_KEYS}  # a turn recorded before the decode fields existed
    assert TurnRecord.from_json(old).issue_json() == old
    s = doc["summary"]
    assert s["turns"] == 2 and s["tokens"] == 4 and s["facts"]["placement_report"].startswith("odirect-zero-copy ON")
    t = doc["turns"][0]
    assert t["tokens_per_s"] == pytest.approx(t["tokens"] / t["seconds"])


def test_run_session_yields_one_record_per_turn(moe64):
    records = list(run_session(moe64, HostDevice(), turns=3, tokens=1, cache_mib=0.5, experts_per_token=1))
    assert [r.turn for r in records] == [0, 1, 2] and all(r.tokens == 1 for r in records)


def test_trace_file_drives_the_session(moe64, tmp_path):
    layers = sorted({b.layer for b in moe64.blobs})
    trace = synthetic_trace(3, layers, 64, 2, distribution="zipf", seed=9)
    save_trace(trace, tmp_path / "t.csv")
    _, rep = session(moe64, 2, 3, trace=str(tmp_path / "t.csv"), experts_per_token=None, cache_mib=4, verify=True)
    assert rep.summary.facts.trace == str(tmp_path / "t.csv")
    assert "replayed 2.0 times" in rep.summary.facts.trace_note
    assert rep.turns[1].misses == 0  # the replayed second turn finds every expert already cached
    with pytest.raises(ParamError, match="experts_per_token"):
        session(moe64, 1, 1, trace=str(tmp_path / "t.csv"), experts_per_token=4)
    (tmp_path / "bad.csv").write_text("0,0,1\n")
    with pytest.raises(TraceError, match="missing MoE layers"):
        session(moe64, 1, 1, trace=str(tmp_path / "bad.csv"), experts_per_token=None)


@pytest.mark.parametrize("kw", [{"turns": 0}, {"tokens": -1}, {"cache_mib": 0}, {"cache_mib": 0.01}])
def test_bad_session_arguments(moe64, kw):
    args = {"turns": 1, "tokens": 1, "cache_mib": 0.5} | kw
    with pytest.raises(ParamError):
        ExpertSession(moe64, HostDevice(), SessionConfig(**args))


def test_each_turn_records_the_workers_cpu_over_it(moe64):
    _, report = session(moe64, 2, 2)
    for t in report.turns:
        assert t.cpu_user_s >= 0 and t.cpu_sys_s >= 0  # recorded (-1 is "not recorded")
        assert t.cpu_user_s + t.cpu_sys_s <= t.seconds * (os.cpu_count() or 1) + 0.05  # + getrusage's tick
    old = {k: getattr(report.turns[0], k) for k in ISSUE_KEYS}  # recorded before it existed: -1, not 0
    assert TurnRecord.from_json(old).cpu_user_s == -1.0
