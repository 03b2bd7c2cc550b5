"""Session statistics say what they are (issue 23, section 3): an A/B's verdicts carry the n < 5 caveat in
its text, its JSON and the ledger; its cells show the figures its effects compare; its default rounds can
make a claim; the cache's bookkeeping is timed on its own, out of the residual; steady state (see
test_session_defaults.py); an A/B under a memory limit says how it was enforced and each cell's outcome."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.expert.session import ExpertSession, SessionConfig
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import SessionReport, summarize
from workbench.ledger import Ledger
from workbench.measure.session.record import session_stats
from workbench.records import RunConfig
from workbench.upload.host import HostDevice

CAVEAT3 = "(n=3 < 5: not a claim)"
FILLING_TPS = 1.0  # every fake cell's turn 0: the cache filling, far below the turns after it


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


@pytest.fixture(scope="module")
def moe64(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)


def _facts() -> SessionFacts:
    return SessionFacts("inplace", "", "ON", "pread", "", "on", "lru", 1, 1, 1, "synthetic", "", "host", False)


def _fake_cells(monkeypatch, memory: dict[int, tuple[str, str]] | None = None) -> list[str]:
    """``measure_session`` replaced by cells recorded in the ledger it is given: six turns each, turn 0
    at FILLING_TPS, then the candidate 1.2× the baseline's tok/s (a 1 % drift a round). ``memory``: cell
    number → (outcome, error) under a cgroup-v1 limit."""
    import workbench.measure.session.runner as session_mod

    calls: list[str] = []

    def fake(file, config, *, device="host", cache="asis", label="", ledger=None, campaign="default",
             hypothesis="", timeout_s=0.0, **_kw):
        cand = config.placement == "inplace"
        rnd = sum(1 for c in calls if c == config.placement)
        calls.append(config.placement)
        tps = 4.0 * (1.2 if cand else 1.0) * (1 + 0.01 * rnd)
        turns = [TurnRecord(turn=i, tokens=10, bytes_read=1000, hits=1, misses=1, evictions=0, minflt=0, majflt=0,
                            accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=0, seconds=10 / r,
                            tokens_per_s=r, residual_s_per_token=0.5 / r, bookkeeping_s=0.01, read_busy_s=0.1,
                            landed_bytes=100, shift_copy_bytes=0 if cand else 2 << 20, shift_copy_s=0.0 if cand else
                            0.004) for i, r in enumerate([FILLING_TPS] + [tps] * 5)]
        attempt = ledger.start_attempt(campaign=campaign, config=RunConfig(file, "session", {}, device), cache=cache,
                                       label=label, kind="session")
        outcome, error = (memory or {}).get(len(calls) - 1, ("", None))
        mem = dict(memory_method="cgroup-v1", memory_limit="cgroup v1 /x: memory.limit_in_bytes 64 MiB",
                   memory_outcome=outcome, memory=f"cgroup v1 /x: memory.limit_in_bytes 64 MiB — {outcome}") \
            if memory is not None else {}
        report = SessionReport(tuple(turns), summarize(turns, _facts(), verified_slices=4))
        ledger.finish_attempt(attempt, session_stats(turns), baseline_id=None, speedup=None, verdict="baseline")
        return session_mod.SessionResult(attempt, file, device, cache, None, report, "baseline", "", error, **mem)

    monkeypatch.setattr(session_mod, "measure_session", fake)
    return calls


def _ab(moe64, tmp_path, *extra: str):
    ledger = tmp_path / "ab.sqlite"
    args = ["session", moe64.path, "--turns", "3", "--tokens", "10", "--ab", "placement=bounce", "--ab",
            "placement=inplace", "--ledger", str(ledger), "--campaign", "ab", *extra]
    return CliRunner().invoke(main, args, catch_exceptions=False), ledger


def test_an_ab_at_three_rounds_says_its_verdicts_are_not_a_claim_everywhere(moe64, tmp_path, monkeypatch):
    calls = _fake_cells(monkeypatch)
    text, ledger = _ab(moe64, tmp_path, "--rounds", "3")
    assert text.exit_code == 0, text.output
    calls.clear()
    tps = next(line for line in text.stdout.splitlines() if line.startswith("placement=inplace: tok/s:"))
    assert f"higher (better) {CAVEAT3}" in tps and "n = 3" in tps
    doc = json.loads(_ab(moe64, tmp_path, "--rounds", "3", "--json")[0].stdout)
    effect = next(e for e in doc["effects"] if e["metric"] == "tok/s")
    assert effect["verdict"] == "higher" and effect["caveat"] == CAVEAT3 and effect["n"] == 3
    assert all(e["caveat"] == "" for e in doc["effects"] if e["verdict"] == "inconclusive")
    with Ledger(ledger) as led:  # the cells' verdicts rest on 3 rounds, not on their 6 turns
        cand = led.attempts("ab")
    cand = cand[cand["label"].str.startswith("placement=inplace")]
    assert set(cand["verdict"]) == {"faster"} and set(cand["verdict_n"]) == {3}
    assert set(cand["verdict_text"]) == {f"faster {CAVEAT3}"}
    listed = CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "list", "--campaign", "ab"])
    assert listed.output.count(CAVEAT3) == len(cand) == 6, listed.output  # both A/Bs' candidate cells


def test_an_ab_at_the_default_rounds_pairs_them_and_can_make_a_claim(moe64, tmp_path, monkeypatch):
    calls = _fake_cells(monkeypatch)
    result, ledger = _ab(moe64, tmp_path, "--json")
    assert result.exit_code == 0, result.output
    assert len(calls) == 12  # 6 rounds × 2 arms
    doc = json.loads(result.stdout)
    effect = next(e for e in doc["effects"] if e["metric"] == "tok/s")
    assert effect["n"] == 6 and "paired rounds" in effect["reason"] and effect["verdict"] == "higher"
    assert effect["caveat"] == ""
    with Ledger(ledger) as led:
        a = led.attempts("ab")
    assert set(a[a["label"].str.startswith("placement=inplace")]["verdict_text"]) == {"faster"}
    from workbench.measure.run.effect import MIN_PAIRED_ROUNDS
    from workbench.measure.session.ab import DEFAULT_ROUNDS

    assert DEFAULT_ROUNDS == MIN_PAIRED_ROUNDS  # the CLI spells it out; this holds them together
    text = CliRunner().invoke(main, ["session", "--help"]).output
    assert f"[default: {DEFAULT_ROUNDS}; 1<=x<=1000]" in " ".join(text.split())  # bounded both ends (issue 35 §5)


def test_an_abs_cells_show_the_figures_its_effects_compare(moe64, tmp_path, monkeypatch):
    calls = _fake_cells(monkeypatch)
    text, _ = _ab(moe64, tmp_path, "--rounds", "3")
    calls.clear()
    lines = text.stdout.splitlines()
    assert "each cell's figures, like the effects, leave out its first 1 turn" in lines[0]
    cells = [line for line in lines if " round " in line]
    assert len(cells) == 6
    first = cells[0]  # baseline, round 1: 4.00 tok/s after turn 0, 2.67 over all six turns
    assert "tok/s 4.00," in first and "shift copy 0.20 MiB/token 0.40 ms/token" in first, first
    effect = next(line for line in lines if line.startswith("placement=inplace: tok/s:"))
    assert effect.split(": ", 2)[2].startswith("4.04 → 4.85"), effect  # the medians of those same figures
    doc = json.loads(_ab(moe64, tmp_path, "--rounds", "3", "--json")[0].stdout)
    assert doc["cells"][0]["figures"]["tok/s"] == pytest.approx(4.0)
    assert doc["cells"][0]["summary"]["tokens_per_s"] == pytest.approx(60 / (10 + 5 * 2.5))  # all turns: kept


def test_an_ab_under_a_memory_limit_says_how_and_each_cells_outcome(moe64, tmp_path, monkeypatch):
    oom = "OOM-killed (cgroup oom_kill +1), after 2 turns"
    calls = _fake_cells(monkeypatch, memory={0: ("no pressure seen (the session stayed under the limit)", None),
                                     1: ("reclaim and re-reads: the limit was hit 3 times, 9 refaults, 0 major faults",
                                         None), 2: (oom, "session worker exit -9: killed (SIGKILL)"),
                                     3: ("no pressure seen (the session stayed under the limit)", None)})
    text, _ = _ab(moe64, tmp_path, "--rounds", "2", "--memory-limit", "64")
    assert text.exit_code == 1  # a cell did not finish: a failed check
    out = text.stdout
    assert "memory limit enforced by cgroup-v1" in out
    kinds = [line.split(":")[0].strip() for line in out.splitlines() if line.startswith("    memory ")]
    assert kinds == ["memory none", "memory reclaim", "memory OOM", "memory none"], out
    assert f"memory OOM: cgroup v1 /x: memory.limit_in_bytes 64 MiB — {oom}" in out
    calls.clear()
    doc = json.loads(_ab(moe64, tmp_path, "--rounds", "2", "--memory-limit", "64", "--json")[0].stdout)
    assert [c["memory"]["outcome"] for c in doc["cells"]] == ["none", "reclaim", "OOM", "none"]
    assert doc["cells"][2]["memory"]["method"] == "cgroup-v1" and doc["cells"][2]["memory"]["detail"] == oom


def test_a_real_ab_under_a_cgroup_limit_reports_it(moe64, tmp_path):
    from workbench.errors import ParamError
    from workbench.measure.session.pressure import MemoryPressure

    try:
        with MemoryPressure(64, "cgroup"):
            pass
    except ParamError as exc:
        pytest.skip(f"no memory cgroup can be made here: {exc}")
    args = ["session", moe64.path, "--turns", "2", "--tokens", "2", "--cache-mib", "1", "--experts-per-token", "4",
            "--reader", "pread", "--memory-limit", "256", "--ab", "placement=bounce", "--ab", "placement=inplace",
            "--rounds", "1", "--ledger", str(tmp_path / "l.sqlite"), "--json"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    memory = [c["memory"] for c in json.loads(result.stdout)["cells"]]
    assert all(m["method"].startswith("cgroup") and m["outcome"] in ("none", "reclaim") for m in memory), memory


def test_the_caches_bookkeeping_is_timed_on_its_own_and_out_of_the_residual(moe64, monkeypatch):
    import workbench.io.pagecache as pagecache

    looked = []
    real = pagecache.resident_fraction

    def slow_gate(*args, **kw):  # the mincore gate, made slow enough to see: 2 ms a miss
        looked.append(1)
        time.sleep(0.002)
        return real(*args, **kw)

    monkeypatch.setattr(pagecache, "resident_fraction", slow_gate)
    config = SessionConfig(turns=3, tokens=2, cache_mib=1.0, experts_per_token=4, gate=0.5)
    with ExpertSession(moe64, HostDevice(), config) as s:
        turns = list(s.turns())
    assert looked  # the gate ran at every miss
    for t in turns:
        gate_s = t.misses * 0.002
        assert t.bookkeeping_s >= gate_s, (t.bookkeeping_s, gate_s)
        assert t.residual_s_per_token * t.tokens < t.bookkeeping_s / 2  # not a change in compute
        assert t.residual_s_per_token * t.tokens == pytest.approx(t.seconds - t.stall_s - t.bookkeeping_s, abs=1e-6)
        assert t.other_s + t.compute_s == pytest.approx(t.residual_s_per_token * t.tokens, abs=1e-6)
    summary = summarize(turns, s.facts)
    assert summary.bookkeeping_s == pytest.approx(sum(t.bookkeeping_s for t in turns))


def test_a_session_prints_its_bookkeeping_and_shift_copy_and_records_them(moe64, tmp_path):
    ledger = tmp_path / "one.sqlite"
    result = CliRunner().invoke(main, ["session", moe64.path, "--turns", "2", "--tokens", "2", "--cache-mib", "1",
                                       "--experts-per-token", "4", "--placement", "bounce",
                                       "--ledger", str(ledger), "--campaign", "one"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "book s" in result.stderr and "shift MiB/t" in result.stderr  # the per-turn table
    import re

    said = re.search(r"bookkeeping (\d+\.\d+) s \((\d+\.\d+) ms/token\)", result.stdout)
    shift = re.search(r"shift copy (\d+\.\d+) MiB/token, (\d+\.\d+) ms/token", result.stdout)
    assert said and shift and float(shift.group(1)) > 0, result.stdout
    with Ledger(ledger) as led:
        turns = led.turns(campaign="one")
    extra = turns["extra"].tolist()
    assert all(e["bookkeeping_s"] > 0 and e["shift_copy_s"] > 0 for e in extra)
    assert sum(e["bookkeeping_s"] for e in extra) == pytest.approx(float(said.group(1)), abs=1e-3)


def test_a_turn_recorded_before_bookkeeping_was_timed_reads_back_as_not_timed():
    old = {"turn": 0, "tokens": 2, "bytes_read": 0, "hits": 0, "misses": 0, "evictions": 0, "minflt": 0, "majflt": 0,
           "accounted_bytes": 0, "actual_anon_bytes": 0, "unreleased_pages": 0, "seconds": 1.0, "tokens_per_s": 2.0,
           "residual_s_per_token": 0.5}
    record = TurnRecord.from_json(old)
    assert record.bookkeeping_s == -1
    from workbench.measure.session.runner import summary_line

    s = summarize([record], _facts())
    assert s.bookkeeping_s == -1
    assert "bookkeeping not timed (in the residual)" in summary_line(SessionReport((record,), s))


def test_an_ab_without_cgroups_holds_one_balloon_over_every_cell(moe64, tmp_path, monkeypatch):
    """Where no cgroup can be made (the H200), `session --ab --memory-limit` inflates one balloon before
    the first cell and holds it over all of them, instead of locking ~120 GB again for every cell."""
    from workbench.measure.session import balloon
    from workbench.measure.session import cgroups
    from workbench.measure.session import pressure
    from workbench.measure.session.balloon import measure_working_set

    def refused(*_a, **_k):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(cgroups, "make_v2", refused)
    monkeypatch.setattr(pressure, "_make_v1", refused)
    inflated = []
    real = balloon.Balloon.inflate
    monkeypatch.setattr(balloon.Balloon, "inflate", lambda self: inflated.append(self.size) or real(self))
    limit = (pressure.meminfo("MemAvailable") - measure_working_set().bytes - (32 << 20)) / (1 << 20)
    args = ["session", moe64.path, "--turns", "2", "--tokens", "1", "--cache-mib", "1", "--experts-per-token", "4",
            "--reader", "pread", "--memory-limit", f"{limit:.0f}", "--ab", "placement=bounce",
            "--ab", "placement=inplace", "--rounds", "1", "--ledger", str(tmp_path / "l.sqlite"), "--json"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    memory = [c["memory"] for c in json.loads(result.stdout)["cells"]]
    assert len(memory) == 2 and all(m["method"] == "balloon" for m in memory), memory
    assert len(inflated) == 1
