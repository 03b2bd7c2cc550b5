"""``workbench ledger`` through click's CliRunner: list, show, verdict, export, merge, errors."""
from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.ledger import Ledger


def invoke(*args: str):
    return CliRunner().invoke(main, ["ledger", *args], catch_exceptions=False)


def test_list_and_show(tmp_path):
    path = str(tmp_path / "l.sqlite")
    base, fast, failed = fill_ledger(tmp_path / "l.sqlite")
    out = invoke("--ledger", path, "list", "--campaign", "c")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split()[:3] == ["id", "campaign", "host"] and len(lines) == 4
    assert any(line.startswith(fast[:8]) and "faster" in line for line in lines)
    shown = invoke("--ledger", path, "show", fast[:10])
    assert shown.exit_code == 0 and fast in shown.output and "runs (5):" in shown.output
    assert "environment.kernel: 6.8" in shown.output
    assert invoke("--ledger", path, "list", "--campaign", "zzz").output.startswith("no attempts in campaign 'zzz'")


def test_ledger_path_from_environment(tmp_path, monkeypatch):
    fill_ledger(tmp_path / "env.sqlite")
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "env.sqlite"))
    assert len(invoke("list").output.splitlines()) == 4


def test_verdict_edits_and_unknown_id_is_one_line_exit_2(tmp_path):
    path = str(tmp_path / "l.sqlite")
    _, fast, _ = fill_ledger(tmp_path / "l.sqlite")
    out = invoke("--ledger", path, "verdict", fast[:8], "reverted", "--note", "slower on the APU")
    assert out.exit_code == 0 and out.output.strip() == f"{fast[:8]}: reverted"
    with Ledger(path) as led:
        assert led.attempt(fast)["verdict"] == "reverted" and "slower on the APU" in led.attempt(fast)["notes"]
    bad = CliRunner().invoke(main, ["ledger", "--ledger", path, "verdict", "abcdef123", "kept"])
    assert bad.exit_code == 2 and "no attempt with id 'abcdef123'" in bad.output
    assert CliRunner().invoke(main, ["ledger", "--ledger", path, "verdict", fast, "great"]).exit_code == 2


def test_export_both_and_neither(tmp_path):
    path = str(tmp_path / "l.sqlite")
    fill_ledger(tmp_path / "l.sqlite")
    out = invoke("--ledger", path, "export", "--csv", str(tmp_path / "csv"), "--markdown", str(tmp_path / "t.md"),
                 "--campaign", "c")
    assert out.exit_code == 0 and out.output.count("wrote ") == 3
    assert len(pd.read_csv(tmp_path / "csv" / "attempts.csv")) == 3
    assert (tmp_path / "t.md").read_text().startswith("**Campaign** c · **Machine** rig-a")
    neither = CliRunner().invoke(main, ["ledger", "--ledger", path, "export"])
    assert neither.exit_code == 2 and "--csv" in neither.output


def test_merge_reports_counts_and_is_idempotent(tmp_path):
    fill_ledger(tmp_path / "a.sqlite", host="rig-a")
    fill_ledger(tmp_path / "b.sqlite", host="rig-b")
    args = ("--ledger", str(tmp_path / "a.sqlite"), "merge", str(tmp_path / "b.sqlite"))
    assert "attempts: +3" in invoke(*args).output
    assert "attempts: +0" in invoke(*args).output and "runs: +0" in invoke(*args).output
    listed = invoke("--ledger", str(tmp_path / "a.sqlite"), "list").output
    assert "rig-a" in listed and "rig-b" in listed


def test_reading_a_ledger_that_does_not_exist_is_one_line_and_creates_nothing(tmp_path, monkeypatch):
    typo = tmp_path / "typo.sqlite"
    for args in (["list"], ["show", "abcdef12"], ["export", "--markdown", str(tmp_path / "t.md")],
                 ["verdict", "abcdef12", "kept"]):
        out = CliRunner().invoke(main, ["ledger", "--ledger", str(typo), *args])
        assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
        assert out.output.startswith(f"workbench: error: {typo}: no ledger here")
    assert not typo.exists() and not (tmp_path / "t.md").exists()
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "missing-dir" / "l.sqlite"))
    out = CliRunner().invoke(main, ["ledger", "list"])
    assert out.exit_code == 2 and "no directory" in out.output and not (tmp_path / "missing-dir").exists()


def test_ledger_option_after_the_subcommand_too(tmp_path):
    path = str(tmp_path / "l.sqlite")
    _, fast, _ = fill_ledger(tmp_path / "l.sqlite")
    after = invoke("list", "--ledger", path)
    assert after.exit_code == 0 and after.output == invoke("--ledger", path, "list").output
    assert invoke("show", fast[:8], "--ledger", path).exit_code == 0
    both = CliRunner().invoke(main, ["ledger", "--ledger", path, "list", "--ledger", str(tmp_path / "x.sqlite")])
    assert both.exit_code == 2 and "given twice with different paths" in both.output


def test_list_has_a_model_column_and_the_interval(tmp_path):
    path = str(tmp_path / "l.sqlite")
    _, fast, _ = fill_ledger(tmp_path / "l.sqlite")
    lines = invoke("--ledger", path, "list").output.splitlines()
    assert lines[0].split()[:5] == ["id", "campaign", "host", "model", "change"]
    with Ledger(path) as led:
        a = led.attempt(fast)
    row = next(line for line in lines if line.startswith(fast[:8]))
    assert row.split()[3] == "tiny" and f"{a['speedup']:.2f}× [{a['ci_low']:.2f}–{a['ci_high']:.2f}]" in row


def test_export_dash_is_standard_output(tmp_path, monkeypatch):
    import io

    path = str(tmp_path / "l.sqlite")
    fill_ledger(tmp_path / "l.sqlite")
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, ["ledger", "--ledger", path, "export", "--csv", "-",
                                    "--markdown", str(tmp_path / "t.md")])
    assert out.exit_code == 0 and not (tmp_path / "-").exists()
    assert len(pd.read_csv(io.StringIO(out.stdout))) == 3 and "wrote" not in out.stdout
    assert "wrote" in out.stderr and (tmp_path / "t.md").is_file()
    md = invoke("--ledger", path, "export", "--markdown", "-")
    assert md.output.startswith("**Machine** rig-a") and not (tmp_path / "-").exists()


def test_an_option_given_twice_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "l.sqlite")
    fill_ledger(tmp_path / "l.sqlite")
    out = CliRunner().invoke(main, ["ledger", "--ledger", path, "list", "--campaign", "a", "--campaign", "c"])
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert "workbench ledger list: parameter '--campaign': given 2 times" in out.output
    out = CliRunner().invoke(main, ["ledger", "--ledger", path, "--ledger", path, "list"])
    assert out.exit_code == 2 and "parameter '--ledger': given 2 times" in out.output
