"""Exit statuses scripts can trust: 0 only when every run finished and verified, 3 (and one summary
line) when a run failed, timed out, read back wrong bytes or missed its cache state, 2 for bad input."""
from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.cli.exits import EXIT_RUNS_FAILED, RunTally, tally_run


@pytest.fixture
def env(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from workbench.formats.synth import write_synthetic

    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    write_synthetic(tmp_path / "m.gguf", format="gguf", layout="dense", size=1 << 20)
    return tmp_path


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _summary(out) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.startswith("FAILED RUNS:")]


def test_run_that_times_out_exits_3_with_one_summary_line(env: Path) -> None:
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--runs", "2", "--timeout", "0.01")
    assert out.exit_code == EXIT_RUNS_FAILED == 3, out.output
    (line,) = _summary(out)
    assert line == "FAILED RUNS: 2/2 runs did not finish and verify (2 failed, 2 of them timed out) — exit 3"
    assert "ledger:" in out.stdout  # the table and the ledger line are still printed


def test_run_and_compare_that_finish_and_verify_exit_0(env: Path) -> None:
    out = _invoke("compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap", "--runs", "1",
                  "--cache", "warm")
    assert out.exit_code == 0, out.output
    assert not _summary(out)


def test_compare_json_with_a_failed_config_exits_3(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workbench.measure.run.runner as runner

    real = runner.run_worker

    def wrong_bytes_for_mmap(config, **kw):
        out = real(config, **kw)
        return dataclasses.replace(out, verified=False) if config.strategy == "mmap" else out

    monkeypatch.setattr(runner, "run_worker", wrong_bytes_for_mmap)
    out = _invoke("compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap", "--runs", "2",
                  "--cache", "warm", "--json")
    assert out.exit_code == 3, out.output
    assert _summary(out) == ["FAILED RUNS: 2/4 runs did not finish and verify (2 read back wrong bytes) — exit 3"]
    import json

    assert [a["verdict"] for a in json.loads(out.stdout)] == ["baseline", "failed"]  # stdout stays JSON


def test_a_cache_state_not_reached_exits_3(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import workbench.measure.run.runner as runner

    from workbench.measure.run.model import CachePrepared

    monkeypatch.setattr(runner, "prepare_cache", lambda model, state: CachePrepared(1.0, False, "tmpfs: cannot evict"))
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--runs", "2", "--cache", "cold")
    assert out.exit_code == 3, out.output
    assert _summary(out) == ["FAILED RUNS: 2/2 runs did not finish and verify (2 missed the cache state asked "
                             "for) — exit 3"]


def test_external_whose_marker_never_appears_exits_3(env: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c \"print('still loading')\""
    out = _invoke("external", "--cmd", cmd, "--marker", "ready$", "--file", str(env / "m.gguf"), "--runs", "2",
                  "--cache", "warm", "--device", "host")
    assert out.exit_code == 3, out.output
    assert _summary(out) == ["FAILED RUNS: 2/2 runs did not finish and verify (2 failed) — exit 3"]


def test_external_that_times_out_exits_3(env: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c \"import time; time.sleep(30)\""
    out = _invoke("external", "--cmd", cmd, "--marker", "ready$", "--file", str(env / "m.gguf"), "--runs", "1",
                  "--cache", "warm", "--device", "host", "--timeout", "0.5")
    assert out.exit_code == 3 and "1 of them timed out" in out.stderr, out.output


def test_bad_input_stays_2(env: Path) -> None:
    out = CliRunner().invoke(main, ["run", str(env / "m.gguf"), "--strategy", "nope"])
    assert out.exit_code == 2 and not _summary(out)


@pytest.mark.parametrize("command", ["run", "compare", "external", "sweep", "session"])
def test_help_documents_the_exit_statuses(command: str) -> None:
    out = CliRunner().invoke(main, [command, "--help"], terminal_width=200)
    assert out.exit_code == 0
    text = " ".join(out.output.split())
    assert "Exit status: 0" in text and "; 3 " in text and "2 bad input" in text, text


def test_the_manual_documents_the_exit_statuses() -> None:
    from guides import section as guide_section

    _, section = guide_section("Exit status")
    for code in ("`0`", "`2`", "`3`", "`130`"):
        assert code in section[:2000]
    for command in ("run", "compare", "external", "sweep", "session"):
        assert f"`{command}`" in section[:2000]


def test_tally_counts_each_problem_once_per_run() -> None:
    both = tally_run("worker timed out after 1 s", False, None, "cold", False)  # failed and missed
    total = both + tally_run(None, True, True, "warm", True) + tally_run(None, True, False, "asis", None)
    assert total == RunTally(runs=3, failed=1, timed_out=1, wrong_bytes=1, cache_missed=1, bad=2)
    assert total.summary() == ("FAILED RUNS: 2/3 runs did not finish and verify (1 failed, 1 of them timed out; "
                               "1 read back wrong bytes; 1 missed the cache state asked for)")
    assert RunTally(runs=4).summary() is None
