"""``workbench session --ab``: arms parsed over the session's options, cells in ABBA order as fresh
workers, same bytes per token checked, effects as ratios with intervals, verdicts in the ledger."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert.session import SessionConfig
from workbench.expert.session_records import TurnRecord
from workbench.ledger import Ledger
from workbench.measure.session.ab import parse_ab, run_session_ab

BASE = SessionConfig(turns=3, tokens=2, cache_mib=1.0, experts_per_token=4)


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def test_parse_ab_sets_any_option():
    arm = parse_ab("placement=bounce boundary-release=off lanes=4 overlap=on compute=sleep:5 gate=none", BASE,
                   "warm", "host")
    c = arm.config
    assert (c.placement, c.boundary_release, c.lanes, c.overlap, c.compute, c.gate) == \
        ("bounce", "off", 4, True, "sleep:5", None)
    assert set(arm.changed) == {"placement", "boundary_release", "lanes", "overlap", "compute", "gate"}
    cold = parse_ab("cache=cold cache_mib=2.5", BASE, "warm", "host")
    assert cold.cache == "cold" and cold.config.cache_mib == 2.5 and cold.changed == ("cache_mib", "cache")


@pytest.mark.parametrize("spec,match", [("placement", "key=value"), ("colour=red", "unknown option"),
                                        ("lanes=many", "expected int"), ("overlap=maybe", "expected bool"),
                                        ("placement=sideways", "placement"), ("", "sets nothing")])
def test_bad_arms_are_one_line(spec, match):
    with pytest.raises(ParamError, match=match):
        parse_ab(spec, BASE, "asis", "host")


def _fake_result(tps: float, bytes_per_token: float, arm: int, rnd: int, cpu: float = -1.0):
    turns = tuple(TurnRecord(turn=i, tokens=10, bytes_read=int(bytes_per_token * 10), hits=1, misses=1, evictions=0,
                             minflt=0, majflt=arm, accounted_bytes=0, actual_anon_bytes=0, unreleased_pages=7 * arm,
                             seconds=10 / tps, tokens_per_s=tps, residual_s_per_token=1 / tps, read_busy_s=0.5,
                             landed_bytes=100, cpu_user_s=cpu * (i + 1), cpu_sys_s=max(cpu, 0.0))
                  for i in range(3))
    summary = SimpleNamespace(bytes_read_per_token=bytes_per_token, landed_bytes_per_token=10.0, verified_slices=5)
    return SimpleNamespace(report=SimpleNamespace(turns=turns, summary=summary), error=None,
                           attempt_id=f"{arm}{rnd}" * 4, notes="", verdict="baseline")


def test_cells_run_abba_and_effects_are_ratios_with_intervals():
    arms = [parse_ab("placement=bounce", BASE, "asis", "host"), parse_ab("placement=inplace", BASE, "asis", "host")]
    order = []

    def cell(arm, label):
        i = [a.label for a in arms].index(arm.label)
        assert arm.config.verify_end  # every cell checks what it landed
        rnd = sum(1 for a in order if a == i)
        order.append(i)
        return _fake_result(4.0 * (1.2 if i else 1.0) * (1 + 0.01 * rnd), 1000.0, i, rnd)
    result = run_session_ab("m", arms, 6, run_cell=cell)
    assert order == [0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0]
    assert result.skipped_turns == 1 and not result.failed_checks
    tps = next(e for e in result.effects if e.metric == "tok/s")
    assert tps.ratio == pytest.approx(1.2, rel=0.01) and tps.low > 1.0 and tps.verdict == "higher"
    assert tps.judgement == "better" and tps.n == 6 and "paired rounds" in tps.reason
    res = next(e for e in result.effects if e.metric == "residual s/token")
    assert res.ratio == pytest.approx(1 / 1.2, rel=0.01) and res.judgement == "better"
    leak = next(e for e in result.effects if e.metric == "unreleased pages")
    assert leak.ratio is None and "0" in leak.reason  # the baseline leaked nothing: no ratio, said so


def test_different_bytes_per_token_fail_the_check_unless_the_variable_reads_differently():
    arms = [parse_ab("placement=bounce", BASE, "asis", "host"), parse_ab("placement=inplace", BASE, "asis", "host")]
    result = run_session_ab("m", arms, 1, run_cell=lambda arm, _l: _fake_result(4, 1000 + (arm.label == arms[1].label), 0, 0))
    assert any(c.startswith("FAILED: cells read different bytes") for c in result.checks)
    sized = [parse_ab("cache-mib=1", BASE, "asis", "host"), parse_ab("cache-mib=2", BASE, "asis", "host")]
    result = run_session_ab("m", sized, 1, run_cell=lambda arm, _l: _fake_result(4, 1000 + (arm.label == sized[1].label), 0, 0))
    assert not result.failed_checks and any(c.startswith("n/a: bytes read per token differ") for c in result.checks)


def test_cli_ab_runs_cells_checks_bytes_and_records_verdicts(synth_model, tmp_path):
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, [
        "session", index.path, "--turns", "3", "--tokens", "2", "--cache-mib", "1", "--experts-per-token", "4",
        "--ab", "placement=bounce", "--ab", "placement=inplace", "--rounds", "2", "--ledger", str(ledger),
        "--campaign", "ab", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [c["arm"] for c in doc["cells"]] == [0, 1, 1, 0]
    assert all(c.startswith("ok") for c in doc["checks"]), doc["checks"]
    assert {e["metric"] for e in doc["effects"]} >= {"tok/s", "residual s/token", "staged GB/s", "unreleased pages"}
    shift = [c["summary"]["shift_copy_bytes"] for c in doc["cells"]]
    assert shift[0] > 0 and shift[1] == 0  # bounce moves shift bytes, in place none
    with Ledger(ledger) as led:
        a = led.attempts("ab")
    assert list(a["kind"]) == ["session"] * 4
    cand = a[a["label"].str.startswith("placement=inplace")]
    assert cand["baseline_id"].notna().all() and cand["speedup"].notna().all()
    assert set(cand["verdict"]) <= {"faster", "slower", "inconclusive"}
    assert all("A/B vs 'placement=bounce'" in n for n in cand["notes"])
    base = a[a["label"].str.startswith("placement=bounce")]
    assert set(base["verdict"]) == {"baseline"}
    md = tmp_path / "ab.md"
    CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "export", "--markdown", str(md), "--campaign", "ab"])
    assert "placement=inplace" in md.read_text()


def test_each_cell_shows_the_cores_its_worker_kept_busy_or_minus_one_for_old_turns():
    arms = [parse_ab("lanes=1", BASE, "asis", "host"), parse_ab("lanes=4", BASE, "asis", "host")]
    result = run_session_ab("m", arms, 1, run_cell=lambda arm, _l: _fake_result(4, 1000, 0, 0, cpu=1.0))
    # turns 2 and 3 compared (the first fills the cache): cpu (2 + 1) + (3 + 1) over 2 x 2.5 s
    assert [f["cores busy"] for f in result.figures] == [pytest.approx(7 / 5)] * 2
    old = run_session_ab("m", arms, 1, run_cell=lambda arm, _l: _fake_result(4, 1000, 0, 0))
    assert [f["cores busy"] for f in old.figures] == [-1.0, -1.0]  # recorded before it existed: not a zero
