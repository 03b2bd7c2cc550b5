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
