"""Verdicts as every surface shows them: a faster/slower verdict from fewer than 5 runs a side carries
`(n=3 < 5: not a claim)`; a person's verdict stands beside the measured one (`kept · auto: inconclusive`);
keeping an attempt that measured no claim needs a note."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ledger_helpers import record_attempt
from workbench.cli import main
from workbench.errors import ParamError
from workbench.ledger import Ledger
from workbench.measure.run.attempt import AttemptResult, decide
from workbench.records import AttemptStats, RunConfig, format_verdict, keeping_needs_a_note, verdict_n

FAST3 = [0.20, 0.21, 0.20]  # against BASE3: faster, from 3 runs a side
BASE3 = [0.50, 0.52, 0.51]


@pytest.mark.parametrize("verdict, auto, n, shown", [
    ("faster", None, 3, "faster (n=3 < 5: not a claim)"),
    ("slower", "slower", 4, "slower (n=4 < 5: not a claim)"),
    ("faster", "faster", 5, "faster"),
    ("inconclusive", "inconclusive", 3, "inconclusive"),  # no claim made, so none to qualify
    ("kept", "inconclusive", 6, "kept · auto: inconclusive"),
    ("kept", "faster", 3, "kept · auto: faster (n=3 < 5: not a claim)"),
    ("reverted", "slower", float("nan"), "reverted · auto: slower"),
    ("baseline", "baseline", None, "baseline"),
    ("running", None, None, "running"),
])
def test_format_verdict(verdict, auto, n, shown):
    assert format_verdict(verdict, auto, n) == shown


def test_runs_a_side_is_the_smaller_side():
    assert verdict_n(3, 6) == 3 and verdict_n(6.0, 5) == 5 and verdict_n(3, None) is None
    assert verdict_n(float("nan"), 5) is None
    assert keeping_needs_a_note("faster", 3) == "faster (n=3 < 5: not a claim)"
    assert keeping_needs_a_note("faster", 5) == "" and keeping_needs_a_note("baseline", None) == ""
    assert [keeping_needs_a_note(v, 9) for v in ("inconclusive", "slower", "failed")] == [
        "inconclusive", "slower", "failed"]


def _ledger(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        base = record_attempt(led, "pread", BASE3, campaign="few")
        fast = record_attempt(led, "mmap", FAST3, campaign="few", baseline=base)
        same = record_attempt(led, "lanes", [0.50, 0.51, 0.52], campaign="few", baseline=base)
    return path, fast[0], same[0]


def test_the_runner_decision_and_the_cli_table_carry_the_caveat():
    from ledger_helpers import make_run
    from workbench.measure.run.stats import summarize
    from workbench.measure.run.tables import attempts_table

    base = [make_run(i, t) for i, t in enumerate(BASE3)]
    runs = [make_run(i, t) for i, t in enumerate(FAST3)]
    d = decide(runs, base, is_baseline=False, paired=True, min_effect=0.02)
    assert d.verdict == "faster" and d.n == 3
    result = AttemptResult("a" * 32, RunConfig("/m.gguf", "mmap"), "cold", tuple(runs), summarize(runs, 1 << 20),
                           "b" * 32, d.speedup, d.verdict, ci_low=d.ci_low, ci_high=d.ci_high, label="mmap",
                           verdict_n=d.n)
    assert "faster (n=3 < 5: not a claim)" in attempts_table([result])
    assert result.to_json()["verdict_text"] == "faster (n=3 < 5: not a claim)"
    five = AttemptResult("c" * 32, RunConfig("/m.gguf", "mmap"), "cold", (), AttemptStats(5, 0, 1, 1, 1, 0, 1, True),
                         "b" * 32, 2.0, "faster", label="mmap", verdict_n=5)
    assert "not a claim" not in attempts_table([five])


def test_ledger_list_shows_the_caveat_and_the_human_verdict_beside_the_automatic(tmp_path):
    path, fast, same = _ledger(tmp_path)
    out = CliRunner().invoke(main, ["ledger", "list", "--ledger", str(path)], catch_exceptions=False)
    assert "faster (n=3 < 5: not a claim)" in out.output
    out = CliRunner().invoke(main, ["ledger", "verdict", same[:8], "reverted", "--ledger", str(path)])
    assert out.exit_code == 0  # reverting needs no reason
    out = CliRunner().invoke(main, ["ledger", "verdict", fast[:8], "kept", "--note", "the A/B on the H200 holds",
                                    "--ledger", str(path)], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    listed = CliRunner().invoke(main, ["ledger", "list", "--ledger", str(path)], catch_exceptions=False).output
    assert "kept · auto: faster (n=3 < 5: not a claim)" in listed
    row = next(line for line in listed.splitlines() if line.startswith(same[:8]))
    assert row.rstrip().endswith("reverted · auto: inconclusive")
    shown = CliRunner().invoke(main, ["ledger", "show", fast[:8], "--ledger", str(path)]).output
    assert "kept · auto: faster (n=3 < 5: not a claim)" in shown


def test_keeping_a_non_claim_needs_a_note(tmp_path):
    path, fast, same = _ledger(tmp_path)
    for attempt, measured in ((same, "inconclusive"), (fast, r"faster \(n=3 < 5: not a claim\)")):
        out = CliRunner().invoke(main, ["ledger", "verdict", attempt[:8], "kept", "--ledger", str(path)])
        assert out.exit_code == 2 and out.stderr.count("\n") == 1, out.output
        assert f"attempt {attempt[:8]} measured" in out.stderr and "needs a note" in out.stderr
        with Ledger(path) as led, pytest.raises(ParamError, match=measured):
            led.set_verdict(attempt, "kept")  # the Python API refuses the same way
    with Ledger(path) as led:
        assert set(led.attempts()["verdict"]) == {"baseline", "faster", "inconclusive"}  # nothing changed
        assert led.set_verdict(same, "kept", note="cheaper on memory; time is a wash") == same
        assert led.attempt(same)["verdict_text"] == "kept · auto: inconclusive"


def test_a_slower_attempt_kept_needs_a_note_too(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        base = record_attempt(led, "mmap", [0.2] * 5)
        slow = record_attempt(led, "pread", [0.5, 0.52, 0.51, 0.5, 0.53], baseline=base)
        assert led.attempt(slow[0])["verdict_text"] == "slower"
        with pytest.raises(ParamError, match="measured slower"):
            led.set_verdict(slow[0], "kept", note="  ")
        fast = record_attempt(led, "lanes", [0.1] * 5, baseline=base)
        led.set_verdict(fast[0], "kept")  # a claim from 5 runs a side: no note needed


def test_exports_and_report_carry_the_caveat_and_both_verdicts(tmp_path):
    from workbench.ledger import export_csv, markdown_table, write_report

    path, fast, same = _ledger(tmp_path)
    with Ledger(path) as led:
        led.set_verdict(same, "kept", note="memory")
        attempts_csv, _ = export_csv(led, tmp_path / "csv", "few")
        md = markdown_table(led, "few", all_attempts=True)
        paths = write_report(led, "few", tmp_path / "report")
    frame = pd.read_csv(attempts_csv).set_index("id")
    assert frame.loc[fast, "verdict"] == "faster" and frame.loc[fast, "verdict_n"] == 3
    assert frame.loc[fast, "verdict_text"] == "faster (n=3 < 5: not a claim)"
    assert frame.loc[same, "verdict_text"] == "kept · auto: inconclusive"
    assert math.isnan(frame.loc[frame["verdict"] == "baseline", "verdict_n"].iloc[0])
    # "<" is escaped in Markdown (ledger text is untrusted) and renders as itself
    assert "| faster (n=3 \\< 5: not a claim) |" in md and "| kept · auto: inconclusive |" in md
    page = paths.html.read_text()
    assert "faster (n=3 &lt; 5: not a claim)" in page and "kept · auto: inconclusive" in page
    assert "**kept · auto: inconclusive**" in paths.markdown.read_text()  # the attempt history too


def test_notebook_tables_carry_the_caveat(tmp_path):
    from ledger_helpers import make_run
    from workbench.cli.notebooks.actions import attempts_table
    from workbench.cli.notebooks.engines import engine_table, verdict_lines
    from workbench.measure.run.stats import summarize

    path, fast, same = _ledger(tmp_path)
    with Ledger(path) as led:
        frame = attempts_table(led.attempts("few"))
    assert "faster (n=3 < 5: not a claim)" in list(frame["verdict"])
    runs = tuple(make_run(i, t) for i, t in enumerate(FAST3))
    base = AttemptResult("b" * 32, RunConfig("/m", "external"), "warm", runs, summarize(runs, 1), None, 1.0,
                         "baseline", label="old")
    new = AttemptResult("a" * 32, RunConfig("/m", "external"), "warm", runs, summarize(runs, 1), "b" * 32, 2.0,
                        "faster", ci_low=1.9, ci_high=2.1, label="new", verdict_n=3)
    assert verdict_lines([base, new]) == ["new vs old (warm): 2.00× [1.90–2.10] — faster (n=3 < 5: not a claim)"]
    assert list(engine_table([base, new])["verdict"]) == ["baseline", "faster (n=3 < 5: not a claim)"]
