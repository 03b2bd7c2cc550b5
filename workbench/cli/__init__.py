"""The user-facing layer: the ``workbench`` command line, sweeps, the demo and the notebooks' code.

Each command lives in ``workbench/cli/commands/<area>.py`` and is imported only when it runs, so
``workbench --help`` stays fast and no GPU binding loads by accident.

A :class:`~workbench.errors.WorkbenchError` becomes one line on stderr and exit code 2; so does an
option that takes one value given twice (:mod:`workbench.cli.options`), and any usage error click finds
(a number out of its range, :mod:`workbench.cli.numbers`; a missing argument).
"""
from __future__ import annotations

import importlib
import signal
import sys

import click

from workbench.cli.options import RefuseRepeats
from workbench.errors import MeasurementInterrupted, Terminated, WorkbenchError, printable

COMMANDS = {
    "env": ("workbench.cli.commands.env:env", "Machine, file system and device backends."),
    "synth": ("workbench.cli.commands.formats:synth", "Write a synthetic dense or MoE model file."),
    "inspect": ("workbench.cli.commands.formats:inspect", "Show a model file's tensor index."),
    "strategies": ("workbench.cli.commands.strategies:strategies", "List load strategies and parameters."),
    "run": ("workbench.cli.commands.measure:run", "Measure one strategy on a file (fresh process per run)."),
    "compare": ("workbench.cli.commands.measure:compare", "Measure strategies interleaved against a baseline."),
    "ceilings": ("workbench.cli.commands.ceilings:ceilings", "Measure this machine's bandwidth walls."),
    "external": ("workbench.cli.commands.external:external", "Time an external engine's load up to a log marker."),
    "session": ("workbench.cli.commands.session:session", "A long MoE decode session through the expert cache, per turn."),
    "trace": ("workbench.cli.commands.trace:trace", "MoE routing traces: statistics, a fitted generator, policies simulated."),
    "ledger": ("workbench.cli.commands.ledger:ledger", "Read, edit, export and merge the attempt ledger."),
    "sweep": ("workbench.cli.commands.notebooks:sweep", "Run a papermill sweep from a YAML grid."),
    "demo": ("workbench.cli.commands.notebooks:demo", "Synthetic models, default sweep, ledger and report."),
}


_HELP_FOR_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2: a UsageError too


class LazyGroup(RefuseRepeats, click.Group):
    """A group whose subcommands are imported on first use, turning WorkbenchError into one line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, _, attr = COMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        previous = _terminate_like_ctrl_c()
        try:
            return super().invoke(ctx)
        except _HELP_FOR_NO_ARGS:  # a group named alone: its help, as click shows it
            raise
        except click.UsageError as exc:  # a bad option value, a missing argument: one line too, exit 2
            where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            click.echo(f"workbench: error: {printable(exc.format_message())}{where}", err=True)
            sys.exit(exc.exit_code)
        except WorkbenchError as exc:
            click.echo(f"workbench: error: {printable(str(exc))}", err=True)  # one line, whatever it quotes
            sys.exit(2)
        except MeasurementInterrupted as exc:  # Ctrl-C: say what was kept, not just "Aborted!"
            click.secho(f"{exc}; run the command again to measure afresh (an interrupted attempt is never "
                        "continued)", fg="red", bold=True, err=True)
            sys.exit(interrupted_status(exc))
        except Terminated as exc:
            click.secho(f"workbench: {exc}", fg="red", err=True)
            sys.exit(128 + exc.signum)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _terminate_like_ctrl_c() -> dict[int, object]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt): a runner stopped by them closes
    its attempts as interrupted and kills its workers, as on Ctrl-C. Returns the handlers replaced."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, terminate)
    return previous


def interrupted_status(exc: MeasurementInterrupted) -> int:
    """128 + the signal that interrupted the measurement (SIGINT for Ctrl-C)."""
    cause = exc.__cause__
    return 128 + (cause.signum if isinstance(cause, Terminated) else signal.SIGINT)


@click.group(cls=LazyGroup)
@click.version_option(package_name="workbench")
def main() -> None:
    """The load-path workbench: model file on disk → tensors in device memory, measured honestly."""

