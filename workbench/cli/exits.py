"""Exit statuses a script can trust (README, "The command line"): ``run``, ``compare``, ``external``,
``sweep`` and ``session`` exit 0 only when every run finished and was verified, and ``3`` with one
summary line on stderr when any run failed, timed out, read back wrong bytes or missed its cache state.
``2`` stays "refused": bad input (or an error the command names in one line); ``130`` is Ctrl-C.
``external`` alone has ``4``: every run finished, but some show no evidence that the engine read the
model (time only) — ``--time-only`` accepts that on purpose (exit 0).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import click

EXIT_OK = 0
EXIT_REFUSED = 2
EXIT_RUNS_FAILED = 3
EXIT_TIME_ONLY = 4  # external: runs finished without evidence that the engine read the model
EXIT_INTERRUPTED = 130

EXIT_HELP = ("Exit status: 0 every run finished and verified; 3 a run failed, timed out, read back wrong "
             "bytes or missed its cache state (one summary line on stderr; everything is still recorded); "
             "2 bad input (one line, nothing measured); 130 interrupted.")
EXIT_HELP_EXTERNAL = EXIT_HELP.replace("every run finished and verified;", "every run finished, backed by evidence "
                                       "that the engine read the model (or --time-only);").replace(
    "; 2 bad input", "; 4 every run finished but some show no evidence the engine read the model: time only "
    "(one line on stderr; --time-only accepts it); 2 bad input")


@dataclass(frozen=True)
class RunTally:
    """What became of the runs of one command: how many, and how many of each kind went wrong."""

    runs: int = 0
    failed: int = 0  # ended without a load time (crashed, refused, an engine that exited badly)
    timed_out: int = 0  # of ``failed``: killed at the time limit
    wrong_bytes: int = 0  # finished, but the device bytes read back differ from the file
    cache_missed: int = 0  # asked for cold or warm, and mincore said it was not reached
    bad: int = 0  # runs with any of the problems above (a run that failed and missed its state: once)

    def __add__(self, other: RunTally) -> RunTally:
        return RunTally(*(a + b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[int, ...]:
        return (self.runs, self.failed, self.timed_out, self.wrong_bytes, self.cache_missed, self.bad)

    def summary(self, what: str = "runs") -> str | None:
        """``FAILED RUNS: 2/10 runs did not finish and verify (2 failed, 1 of them timed out)``; None when
        every one did."""
        if not self.bad:
            return None
        parts = []
        if self.failed:
            parts.append(f"{self.failed} failed" + (f", {self.timed_out} of them timed out" if self.timed_out else ""))
        if self.wrong_bytes:
            parts.append(f"{self.wrong_bytes} read back wrong bytes")
        if self.cache_missed:
            parts.append(f"{self.cache_missed} missed the cache state asked for")
        return f"FAILED RUNS: {self.bad}/{self.runs} {what} did not finish and verify ({'; '.join(parts)})"


def tally_run(error: str | None, ok: bool, verified: bool | None, cache_state: str | None,
              cache_reached: bool | None) -> RunTally:
    """One run's tally from the fields every run record has (a RunRecord, or a ledger row)."""
    failed = not ok
    timed_out = failed and "timed out" in (error or "")
    missed = cache_state in ("cold", "warm") and cache_reached is False
    wrong = ok and verified is False
    return RunTally(1, int(failed), int(timed_out), int(wrong), int(missed), int(failed or wrong or missed))


def tally_attempts(results: Iterable[Any]) -> RunTally:
    """The runs of the runner's AttemptResults."""
    total = RunTally()
    for result in results:
        for run in result.runs:
            total += tally_run(run.error, run.ok, run.verified, run.cache_state, run.cache_reached)
    return total


def finish_external(tally: RunTally, lacking: int, finished: int, model: str, time_only: bool) -> None:
    """:func:`finish`, then exit 4 when ``lacking`` of the ``finished`` runs show no evidence that the
    engine read ``model`` and ``time_only`` does not accept that (failed runs come first: exit 3)."""
    unbacked = (f"{lacking}/{finished} finished runs show no evidence the engine read {model}: time only, "
                "no GB/s") if lacking and not time_only else None
    finish(tally, extra=[unbacked] if unbacked and tally.bad else ())
    if unbacked:
        click.secho(f"NO EVIDENCE: {unbacked} (--time-only accepts that) — exit {EXIT_TIME_ONLY}", fg="red",
                    bold=True, err=True)
        sys.exit(EXIT_TIME_ONLY)


def finish(tally: RunTally, what: str = "runs", extra: Sequence[str] = ()) -> None:
    """Print the one summary line and exit 3 when a run went wrong (or ``extra`` names another failure);
    return (exit 0) otherwise."""
    line = tally.summary(what)
    if line is None and extra:
        line = f"FAILED: {'; '.join(extra)}"
    elif line is not None and extra:
        line = f"{line}; {'; '.join(extra)}"
    if line is None:
        return
    click.secho(f"{line} — exit {EXIT_RUNS_FAILED}", fg="red", bold=True, err=True)
    sys.exit(EXIT_RUNS_FAILED)


__all__ = ["EXIT_HELP", "EXIT_HELP_EXTERNAL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REFUSED", "EXIT_RUNS_FAILED",
           "EXIT_TIME_ONLY", "RunTally", "finish", "finish_external", "tally_attempts", "tally_run"]
