"""``workbench run | compare | external | ceilings`` through click's CliRunner."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.measure.attempt import ATTEMPT_KEYS, RUN_KEYS


@pytest.fixture
def env(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from workbench.formats.synth import write_synthetic

    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=1 << 20, experts=4)
    return tmp_path


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_compare_json_gives_two_attempts_with_the_issue_keys(env: Path) -> None:
    out = _invoke("compare", str(env / "m.gguf"), "--strategy", "pread evict=1", "--strategy", "mmap",
                  "--runs", "2", "--campaign", "cli", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert isinstance(data, list) and len(data) == 2
    for attempt in data:
        assert set(ATTEMPT_KEYS) <= set(attempt) and attempt["n"] == 2 and len(attempt["runs"]) == 2
        assert all(set(RUN_KEYS) <= set(run) for run in attempt["runs"])
    assert data[0]["params"] == {"evict": "1"} and data[1]["strategy"] == "mmap"
    assert data[0]["verdict"] == "baseline" and data[1]["baseline_id"] == data[0]["attempt_id"]
    assert sorted(r["position"] for a in data for r in a["runs"]) == [0, 1, 2, 3]
    from workbench.ledger import Ledger

    assert len(Ledger(env / "ledger.sqlite").attempts("cli")) == 2


def test_run_prints_a_table_and_the_ledger(env: Path) -> None:
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--param", "evict=0", "--runs", "2",
                  "--cache", "warm", "--label", "keep pages")
    assert out.exit_code == 0, out.output
    assert "keep pages" in out.stdout and "baseline" in out.stdout
    assert f"ledger: {env / 'ledger.sqlite'}" in out.stdout
    assert "median ms" in out.stdout and "% ceiling" in out.stdout


def test_run_json_is_one_object(env: Path) -> None:
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "mmap", "--runs", "1", "--cache", "asis", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["strategy"] == "mmap" and data["runs"][0]["verified"] is True


def test_user_errors_fail_before_any_run(env: Path) -> None:
    out = CliRunner().invoke(main, ["run", str(env / "m.gguf"), "--strategy", "pread", "--param", "bogus=1"])
    assert out.exit_code == 2 and "bogus" in out.output
    out = CliRunner().invoke(main, ["run", str(env / "m.gguf"), "--strategy", "nope"])
    assert out.exit_code == 2 and "unknown strategy" in out.output
    out = CliRunner().invoke(main, ["compare", str(env / "m.gguf"), "--strategy", "pread"])
    assert out.exit_code == 2 and "two or more" in out.output
    assert not (env / "ledger.sqlite").exists()  # nothing was started, so nothing was recorded


def test_failed_attempt_is_shown_loudly(env: Path) -> None:
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--runs", "1", "--timeout", "0.001")
    assert out.exit_code == 0
    assert "FAILED" in out.stderr and "timed out" in out.stderr and "failed" in out.stdout


def test_external_command(env: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c \"print('model ready')\""
    out = _invoke("external", "--cmd", cmd, "--marker", "ready$", "--file", str(env / "m.gguf"),
                  "--runs", "2", "--cache", "warm", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["strategy"] == "external" and data["n"] == 2 and data["params"]["cmd"] == cmd


def test_ceilings_command(env: Path) -> None:
    out = _invoke("ceilings", "--dir", str(env), "--size", "8MiB", "--threads", "2", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert {"page_cache_read_1t", "page_cache_read_2t", "memcpy"} <= {c["name"] for c in data["ceilings"]}
    out = _invoke("ceilings", "--dir", str(env), "--size", "8MiB", "--threads", "1")
    assert out.exit_code == 0 and "page_cache_read_1t" in out.stdout and "ledger:" in out.stdout


def test_unstable_attempt_is_warned_loudly(tmp_path: Path) -> None:
    from workbench.cli.commands.measure import _report
    from workbench.measure import AttemptResult, AttemptStats, RunConfig
    from workbench.measure.stats import stability_warning

    stats = AttemptStats(5, 0, 1.0, 0.8, 1.4, 60.0, 2.0, stable=False)
    result = AttemptResult("a" * 32, RunConfig("m.gguf", "pread"), "cold", (), stats, None, 1.0, "baseline",
                           warning=stability_warning(stats), label="pread", cache_requested="cold")

    class _Ledger:
        path = tmp_path / "l.sqlite"

    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        _report([result], _Ledger(), as_json=True, single=True)
        stderr = err.getvalue().decode()
    assert "WARNING: unstable" in stderr and "60.0 %" in stderr
    assert json.loads(out.getvalue())["attempt_id"] == "a" * 32
