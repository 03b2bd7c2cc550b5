"""``workbench run | compare | external | ceilings`` through click's CliRunner."""
from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.measure.run.attempt import ATTEMPT_KEYS, RUN_KEYS


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
    assert out.exit_code == 3  # README "Exit status": a run failed
    assert "FAILED" in out.stderr and "timed out" in out.stderr and "failed" in out.stdout


def test_external_command(env: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c \"print('model ready')\""
    out = _invoke("external", "--cmd", cmd, "--marker", "ready$", "--file", str(env / "m.gguf"),
                  "--runs", "2", "--cache", "warm", "--json", "--time-only")  # it reads no model: time only
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["strategy"] == "external" and data["n"] == 2 and data["params"]["cmd"] == cmd
    engine = data["runs"][0]["external"]
    assert engine["marker_line"] == "model ready" and engine["binary_hash"].startswith("xxh3_128:")


def test_ceilings_command(env: Path) -> None:
    out = _invoke("ceilings", "--dir", str(env), "--size", "8MiB", "--threads", "2", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert {"page_cache_read_1t", "page_cache_read_2t", "memcpy"} <= {c["name"] for c in data["ceilings"]}
    out = _invoke("ceilings", "--dir", str(env), "--size", "8MiB", "--threads", "1")
    assert out.exit_code == 0 and "page_cache_read_1t" in out.stdout and "ledger:" in out.stdout


def test_unstable_attempt_is_warned_loudly(tmp_path: Path) -> None:
    from workbench.cli.commands.results_out import report_results as _report
    from workbench.measure import AttemptResult, AttemptStats, RunConfig
    from workbench.measure.run.stats import stability_warning

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


def _scripted(monkeypatch: pytest.MonkeyPatch, times: dict[str, float], stop_after: int | None = None) -> None:
    """Runs that take ``times[strategy]`` seconds (± a little), without spawning a worker; Ctrl-C
    after ``stop_after`` runs."""
    from workbench.measure.run import runner
    from workbench.measure.run.spawn import Outcome

    calls = []

    def run(config, **_kw):  # noqa: ANN001, ANN003
        calls.append(config)
        if stop_after is not None and len(calls) > stop_after:
            raise KeyboardInterrupt
        t = times[config.strategy] * (1 + 0.002 * (len(calls) % 3))
        return Outcome(pid=1, load_s=t, wall_s=t + 0.1, bytes=1 << 20, verified=True)
    monkeypatch.setattr(runner, "run_worker", run)


def test_compare_measures_every_listed_cache_state(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, {"pread": 0.10, "mmap": 0.05})
    out = _invoke("compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap", "--runs", "3",
                  "--cache", "asis", "--cache", "warm", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert [(a["cache_requested"], a["strategy"], a["verdict"]) for a in data] == [
        ("asis", "pread", "baseline"), ("asis", "mmap", "faster"),
        ("warm", "pread", "baseline"), ("warm", "mmap", "faster")]
    assert data[3]["baseline_id"] == data[2]["attempt_id"]  # compared within its own state
    for a in data[2:]:  # interleaved within the state: positions 0..5 of that state's own order
        assert sorted(r["position"] for r in a["runs"]) == ([0, 3, 4] if a["strategy"] == "pread" else [1, 2, 5])
    fast = data[1]
    assert fast["speedup"] == pytest.approx(2.0, rel=0.01) and fast["ci_low"] > 1 and fast["ci_high"] < 3
    assert fast["verdict_reason"] == "interval excludes 1 (independent runs)"
    assert all(a["label"].endswith(" · m") for a in data)  # the file stem, as in the notebooks


def test_run_with_two_cache_states_prints_both(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, {"pread": 0.10})
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--runs", "1", "--cache", "asis",
                  "--cache", "warm", "--json")
    assert out.exit_code == 0, out.output
    assert [a["cache_requested"] for a in json.loads(out.stdout)] == ["asis", "warm"]


@pytest.mark.parametrize("args, says", [
    (["--cache", "warm", "--cache", "warm"], "parameter '--cache': warm given more than once"),
    (["--param", "evict=1", "--param", "evict=0"], "parameter 'evict': given twice ('1' and '0')"),
    (["--runs", "2", "--runs", "3"], "parameter '--runs': given 2 times, but it is not repeatable"),
    (["--verify", "--no-verify"], "parameter '--verify/--no-verify': given 2 times"),
])
def test_a_repeated_option_is_never_dropped_silently(env: Path, args: list[str], says: str) -> None:
    out = CliRunner().invoke(main, ["run", str(env / "m.gguf"), "--strategy", "pread", *args])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and says in out.output, out.output
    assert not (env / "ledger.sqlite").exists()
    out = CliRunner().invoke(main, ["ceilings", "--device", "host", "--device", "host"])
    assert out.exit_code == 2 and "host given more than once" in out.output


def test_min_effect_is_a_parameter(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, {"pread": 0.100, "mmap": 0.097})  # 3 % faster, consistently
    args = ["compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap", "--runs", "5",
            "--cache", "asis", "--json"]
    assert json.loads(_invoke(*args).stdout)[1]["verdict"] == "faster"
    data = json.loads(_invoke(*args, "--min-effect", "5").stdout)[1]
    assert data["verdict"] == "inconclusive" and data["verdict_reason"].startswith("effect under the 5% minimum")


def test_ctrl_c_says_what_was_kept_and_how_to_resume(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, {"pread": 0.1, "mmap": 0.1}, stop_after=7)
    out = CliRunner().invoke(main, ["compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap",
                                    "--runs", "3", "--cache", "asis", "--cache", "warm"])
    assert out.exit_code == 130 and "Aborted" not in out.output
    from workbench.ledger import Ledger

    with Ledger(env / "ledger.sqlite") as led:
        attempts = led.attempts()
    cut = attempts[attempts["verdict"] == "failed"]
    # the warm pread attempt with its one run, and the warm mmap attempt, opened before its first run
    # (issue 19): the run Ctrl-C cut short leaves its attempt, interrupted, with no run
    assert len(attempts) == 4 and len(cut) == 2 and set(cut["verdict_reason"]) == {"interrupted"}
    assert sorted(cut["n"]) == [0, 1]
    line = out.stderr.replace("\r", "\n").strip().splitlines()[-1]
    first, second = cut["id"]
    assert line.startswith(f"interrupted: 7/12 runs recorded: 6 in 2 finished attempts (asis); 1 in {first[:8]}…, "
                           f"{second[:8]}… (marked failed: interrupted); resume with: ")
    assert f"resume with: workbench compare {env / 'm.gguf'} --strategy pread --strategy mmap --runs 3 --cache warm" in line


def test_tables_show_the_interval_and_a_single_runs_spread_as_unmeasured(env: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _scripted(monkeypatch, {"pread": 0.10, "mmap": 0.05})
    out = _invoke("compare", str(env / "m.gguf"), "--strategy", "pread", "--strategy", "mmap", "--runs", "3",
                  "--cache", "asis")
    assert out.exit_code == 0, out.output
    row = next(line for line in out.stdout.splitlines() if "mmap · m" in line)
    assert re.search(r"2\.0\d× \[\d\.\d\d–\d\.\d\d\]\s+faster", row), row
    assert "vs baseline [95 % CI]" in out.stdout
    one = _invoke("run", str(env / "m.gguf"), "--strategy", "pread", "--runs", "1", "--cache", "asis")
    row = next(line for line in one.stdout.splitlines() if "pread · m" in line)
    assert "— ⚠" in row and "0.0 %" not in row and " 0.0 " not in row
    assert "WARNING: one run: no spread measured" in one.stderr


def test_ctrl_c_during_an_external_engine_says_what_was_kept(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.measure.engine import external
    from workbench.measure.run.spawn import Outcome

    calls = []

    def timed(command, *_a, **_kw):  # noqa: ANN001, ANN002, ANN003 - an EngineCommand, since the A/B
        calls.append(command)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return Outcome(pid=1, load_s=0.1, wall_s=0.2, bytes=1 << 20)
    monkeypatch.setattr(external, "time_external", timed)
    out = CliRunner().invoke(main, ["external", "--cmd", "true", "--marker", "x", "--file", str(env / "m.gguf"),
                                    "--runs", "3", "--cache", "asis"])
    assert out.exit_code == 130 and "Aborted" not in out.output
    line = out.stderr.replace("\r", "\n").strip().splitlines()[-1]
    assert line.startswith("interrupted: 1/3 runs recorded in ") and "(marked failed: interrupted)" in line


ENGINES = Path(__file__).resolve().parent / "engines"


def test_external_ab_of_two_engine_commands(env: Path) -> None:
    from workbench.formats.synth import write_synthetic

    model = env / "m.safetensors"
    write_synthetic(model, format="safetensors", layout="dense", size=1 << 20)
    cmd = [sys.executable, str(ENGINES / "safetensors_engine.py"), str(model)]
    slow = [sys.executable, str(ENGINES / "numpy_engine.py"), str(model), "--stall-ms", "4000"]
    out = _invoke("external", "--cmd", shlex.join(cmd), "--cmd", shlex.join(slow), "--label", "st", "--label", "np",
                  "--marker", "model ready", "--start-marker", "phase imports",
                  "--phase", r"phase (?P<name>\w+): (?P<ms>[0-9.]+) ms",
                  "--file", str(model), "--runs", "3", "--cache", "warm", "--device", "host",
                  "--time-only")  # warm, a 1 MiB file copied out of a mapping or pread: not seen (README)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    st, np_ = next(x for x in lines if " st " in x), next(x for x in lines if " np " in x)
    assert "safetensors_engine.py@" in st and "baseline" in st
    assert "numpy_engine.py@" in np_ and "slower" in np_ and re.search(r"0\.\d\d× \[0\.\d\d–0\.\d\d\]", np_)
    assert any(x.startswith("attempt") and "phases: median ms" in x and "stall" in x for x in lines)
    assert "device:" not in out.stderr  # named, so no note about the default


def test_external_refuses_bad_commands_in_one_line(env: Path) -> None:
    out = CliRunner().invoke(main, ["external", "--cmd", "python 'unclosed", "--marker", "x",
                                    "--file", str(env / "m.gguf"), "--device", "host"])
    assert out.exit_code == 2
    assert out.stderr.strip().count("\n") == 0 and "No closing quotation" in out.stderr and "--shell" in out.stderr
    out = CliRunner().invoke(main, ["external", "--cmd", "true", "--cmd", "true", "--cmd", "true", "--marker", "a",
                                    "--marker", "b", "--file", str(env / "m.gguf")])
    assert out.exit_code == 2 and "2 --marker for 3 --cmd" in out.stderr
    assert not (env / "ledger.sqlite").exists()  # refused before anything was recorded


def test_json_and_tables_carry_the_fixed_and_streaming_parts_costs_and_settings(env: Path) -> None:
    out = _invoke("run", str(env / "m.gguf"), "--strategy", "ring direct=off", "--runs", "1", "--cache", "warm",
                  "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    run = data["runs"][0]
    assert set(run["fixed"]) == {"index", "probe", "alloc", "staging", "start", "release"}
    assert run["fixed"]["staging"] > 0 and run["fixed"]["index"] > 0  # the ring's slots, the index read
    assert abs(run["fixed_s"] + run["streaming_s"] - run["load_s"]) < 1e-9 and run["streaming_s"] > 0
    assert {"provision_us", "first_read_us", "unstage_us", "alloc_us"} <= set(run["counters"])
    assert run["costs"]["pinned_peak_bytes"] is not None or run["costs"]["registered_peak_bytes"] > 0
    assert run["path"]["copy_from"] == "pinned"
    assert data["fixed_s"] == run["fixed_s"] and isinstance(data["settings"], dict) and data["settings"]
    table = _invoke("run", str(env / "m.gguf"), "--strategy", "ring direct=off", "--runs", "1", "--cache", "warm")
    assert "fixed + stream ms" in table.stdout
    assert re.search(r"\d+\.\d \+ \d+\.\d", table.stdout), table.stdout
