"""Issue 24 §4: ``workbench ledger show ID`` prints every kind of attempt the workbench writes, each
recorded the way its command records it: ``run`` (all runs ok; some runs failed; every run failed),
``compare``, ``external`` with and without evidence that the engine read the model, ``session``, a
session A/B, an attempt imported from an unrecorded-results dump, and one merged from another machine.
Before the fix, an attempt whose runs mixed successes and failures was a traceback ('float' object is
not subscriptable: pandas fills the missing error of a successful run with NaN)."""
from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.ledger import Ledger

READ = "import os; fd = os.open({path!r}, os.O_RDONLY)\nwhile os.read(fd, 1 << 20): pass\nprint('loaded', flush=True)"


def cli(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _measure_mixed(model: Path, ledger: Path, fail: set[int], campaign: str) -> None:
    """The runner itself (``measure_with`` and real workers), where the runs numbered in ``fail`` are
    given a parameter the strategy refuses: the worker exits non-zero, as a crashed run does."""
    from workbench.measure.run.runner import measure_with
    from workbench.measure.run.spawn import run_worker
    from workbench.records import RunConfig

    calls = iter(range(100))

    def run_fn(config: RunConfig):
        if next(calls) in fail:
            config = RunConfig(config.file, config.strategy, {"threads": -1}, config.device)
        return run_worker(config, timeout_s=60)

    measure_with(run_fn, [RunConfig(str(model), "pread")], runs=3, cache="asis", ledger=ledger,
                 campaign=campaign)


def _imported(model: Path, ledger: Path, tmp: Path) -> None:
    """A real measurement saved as an unrecorded dump (as a failed ledger write leaves it), imported."""
    from workbench.measure.run.runner import measure
    from workbench.measure.run.unrecorded import save_unrecorded, unrecorded_payload
    from workbench.records import RunConfig

    results = measure([RunConfig(str(model), "mmap")], runs=2, cache="asis", ledger=tmp / "lost.sqlite",
                      campaign="imported")
    dump = save_unrecorded(tmp / "lost.sqlite", unrecorded_payload(tmp / "lost.sqlite", "disk I/O error", results,
                                                                   campaign="imported"))
    assert dump is not None
    assert cli("ledger", "import-unrecorded", dump, "--ledger", ledger).exit_code == 0


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory, synth_model) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("kinds")
    mp = pytest.MonkeyPatch()
    mp.setenv("WORKBENCH_LOCK_DIR", str(tmp / "locks"))
    try:
        ledger, model = tmp / "l.sqlite", Path(synth_model("gguf", "dense", size=1 << 20).path)
        moe = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64).path
        common = ("--runs", 2, "--cache", "asis", "--ledger", ledger)
        assert cli("run", model, "--strategy", "pread", "--campaign", "run-ok", *common).exit_code == 0
        _measure_mixed(model, ledger, {1}, "run-mixed")
        _measure_mixed(model, ledger, {0, 1, 2}, "run-all-failed")
        assert cli("compare", model, "--strategy", "pread", "--strategy", "mmap", "--campaign", "compare",
                   *common).exit_code == 0
        py = shlex.quote(sys.executable)
        # no evidence exits 4 (time only); the reader runs cold, so the page cache's gain backs it
        for campaign, code, cache, status in (("external-no-evidence", "print('loaded', flush=True)", "asis", 4),
                                              ("external-evidence", READ.format(path=str(model)), "cold", 0)):
            out = cli("external", "--file", model, "--cmd", f"{py} -c {shlex.quote(code)}", "--marker", "loaded",
                      "--device", "host", "--campaign", campaign, "--runs", 2, "--cache", cache, "--ledger", ledger)
            assert out.exit_code == status, out.output
        session = ("--turns", 2, "--tokens", 2, "--cache-mib", 1, "--experts-per-token", 2, "--ledger", ledger)
        assert cli("session", moe, "--campaign", "session", *session).exit_code == 0
        assert cli("session", moe, "--campaign", "session-ab", "--ab", "placement=bounce", "--ab",
                   "placement=inplace", "--rounds", 1, *session).exit_code == 0
        _imported(model, ledger, tmp)
        other = tmp / "other.sqlite"
        fill_ledger(other, host="rig-b")  # a baseline, a faster attempt and one whose runs all failed
        assert cli("ledger", "merge", other, "--ledger", ledger).exit_code == 0
        with Ledger(ledger, readonly=True) as led:
            frame = led.attempts()
        ids = {f"{c}/{i}": a for i, (c, a) in enumerate(zip(frame["campaign"], frame["id"]))}
        return ledger, ids
    finally:
        mp.undo()


EXPECTED = ["run-ok", "run-mixed", "run-all-failed", "compare", "external-no-evidence", "external-evidence",
            "session", "session-ab", "imported", "c"]  # "c": the merged ledger's campaign


def test_the_ledger_holds_every_kind(every_kind):
    _, ids = every_kind
    campaigns = {key.split("/")[0] for key in ids}
    assert campaigns == set(EXPECTED), campaigns
    with Ledger(every_kind[0], readonly=True) as led:
        runs = led.runs()
        mixed = runs[runs["attempt_id"].isin([a for k, a in ids.items() if k.startswith("run-mixed/")])]
        assert mixed["error"].notna().sum() == 1 and mixed["error"].isna().sum() == 2, mixed["error"]
        kinds = set(led.attempts()["kind"])
    assert {"external", "session"} <= kinds, kinds


@pytest.mark.parametrize("campaign", EXPECTED)
def test_show_prints_every_kind_of_attempt(every_kind, campaign):
    ledger, ids = every_kind
    for key, attempt_id in ids.items():
        if key.split("/")[0] != campaign:
            continue
        out = CliRunner().invoke(main, ["ledger", "--ledger", str(ledger), "show", attempt_id[:12]])
        assert out.exit_code == 0 and out.exception is None, (key, out.output, out.exception)
        assert attempt_id in out.output and ("turns (" in out.output or "runs (" in out.output), out.output
        assert "nan" not in out.output.split("\nruns (")[-1].split("\nturns (")[-1], out.output
