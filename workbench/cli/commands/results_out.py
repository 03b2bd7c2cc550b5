"""What the measuring commands print: a progress bar fed by the runner, the attempts table (or JSON)
with its loud warnings, and the numbers a failed ledger could not keep."""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Callable, Iterator

import click


class Progress:
    """A tqdm bar on stderr fed by the runner's progress callback; silent with --json."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.bar = total, quiet, None

    def __enter__(self) -> Callable[..., None] | None:
        if self.quiet:
            return None
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, unit="run", file=sys.stderr, leave=False)
        return self._update

    def _update(self, done: int, total: int, config: Any, run: Any) -> None:
        last = "FAILED" if run.error else f"{run.load_s * 1e3:.1f} ms"
        self.bar.set_postfix_str(f"{config.display}: {last}")
        self.bar.update(1)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def unrecorded_printed(ledger: Any, as_json: bool, single: bool, earlier: list[Any]) -> Iterator[None]:
    """When the ledger failed mid-measurement, print the numbers anyway — ``earlier`` attempts (recorded)
    and the unrecorded ones, as a table or JSON; the JSON on stdout too when no dump file could be
    written — then let the one-line error through (exit 2)."""
    from workbench.errors import UnrecordedResults

    try:
        yield
    except UnrecordedResults as exc:
        report_results([*earlier, *exc.results], ledger, as_json, single, recorded=False)
        if exc.dump is None and not as_json:
            click.echo(json.dumps([r.to_json() for r in exc.results], indent=2, default=str))
        raise


def report_results(results: list[Any], ledger: Any, as_json: bool, single: bool, recorded: bool = True) -> None:
    from workbench.measure.ranks.runner import spread_line
    from workbench.measure.run.model import describe_sets, recheck_note
    from workbench.measure.run.tables import attempts_table, phases_table
    from workbench.output.untrusted import for_terminal

    for r in results:  # loud, on stderr, in every mode: an unstable number must not pass unseen
        if r.warning:
            click.secho(for_terminal(f"{r.label}: {r.warning}"), fg="yellow", bold=True, err=True)
        if r.verdict == "failed" or r.cache != r.cache_requested:
            click.secho(for_terminal(f"{r.label}: {r.verdict.upper()}: {r.notes or r.cache}"), fg="red", bold=True,
                        err=True)
        decayed = recheck_note(r.runs)
        if decayed:  # the worker put the state back (or the run says it could not): reclaim was at work
            click.secho(for_terminal(f"{r.label}: note: {decayed}"), fg="yellow", err=True)
        ranks = spread_line(r.runs)
        if ranks:  # a load across several ranks: the slowest against the median (docs/multi-gpu.md)
            click.echo(for_terminal(f"{r.label}: {ranks}"), err=True)
    reported = sum(r.report.host_memory_reported_mib or 0 for a in results for r in a.runs)
    if reported > 0:
        click.secho(f"note: this machine handed {reported:,.0f} MiB of freed memory back to its hypervisor "
                    "during these runs (virtio-balloon free page reporting); touching it again faults "
                    "through the hypervisor, which slows and scatters load times — see `workbench env`",
                    fg="yellow", err=True)
    if as_json:
        payload = results[0].to_json() if single else [r.to_json() for r in results]
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    for line in describe_sets([r.config.file for r in results]):  # a set: which files, how much
        click.echo(for_terminal(line))
    click.echo(attempts_table(results))
    phases = phases_table(results)
    if phases:
        click.echo(phases)
    click.echo(for_terminal(f"ledger: {ledger.path}" + ("" if recorded else " — NOT all recorded, see the error below")))
