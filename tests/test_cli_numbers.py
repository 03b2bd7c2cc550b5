"""Issue 35 §5: every number a command takes is bounded at the command line — one line, exit 2, nothing
opened or recorded — and a session's numbers again against the model before its attempt is recorded.

The walk covers every option of every command (the ledger's subcommands too), so a numeric option added
later without a bound fails here."""
from __future__ import annotations

import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import COMMANDS, main, numbers


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    out = []
    group = main
    for name in COMMANDS:
        command = group.get_command(click.Context(main), name)
        if isinstance(command, click.Group):
            out += [((name, sub), command.get_command(click.Context(command), sub)) for sub in command.list_commands(
                click.Context(command))]
        else:
            out.append(((name,), command))
    return out


def _numeric_options() -> list[tuple[tuple[str, ...], click.Option]]:
    return [(words, p) for words, command in _commands() for p in command.params
            if isinstance(p, click.Option) and isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType))]


NUMERIC = _numeric_options()


def test_the_walk_finds_the_numeric_options():
    names = {(" ".join(w), p.opts[0]) for w, p in NUMERIC}
    assert {("session", "--turns"), ("session", "--experts-per-token"), ("run", "--runs"), ("compare", "--timeout"),
            ("synth", "--experts"), ("ceilings", "--threads"), ("demo", "--shards")} <= names, names


@pytest.mark.parametrize("words, option", NUMERIC, ids=[f"{' '.join(w)} {p.opts[0]}" for w, p in NUMERIC])
def test_every_numeric_option_is_bounded_both_ways_and_finite(words, option):
    assert numbers.bounded(option.type), f"workbench {' '.join(words)} {option.opts[0]}: {option.type!r}"


def _too_big(option: click.Option) -> list[str]:
    if isinstance(option.type, numbers.FiniteRange):
        return ["nan", "inf", repr(option.type.max * 10 + 1)]
    return [str(option.type.max + 1), str(option.type.min - 1)]


def _arguments(command: click.Command, existing: Path) -> list[str]:
    return [str(existing) for p in command.params if isinstance(p, click.Argument) and p.required
            for _ in range(p.nargs if p.nargs > 0 else 1)]


@pytest.mark.parametrize("words, option", NUMERIC, ids=[f"{' '.join(w)} {p.opts[0]}" for w, p in NUMERIC])
def test_a_number_out_of_range_is_one_line_exit_2_and_nothing_recorded(tmp_path, words, option):
    data, model = tmp_path / "data", tmp_path / "model.gguf"
    data.mkdir()
    model.write_bytes(b"GGUF")
    command = dict(_commands())[words]
    with defaults.set_data_root(data), defaults.set_ledger_path(data / "ledger.sqlite"):
        for value in _too_big(option):
            args = [*words, option.opts[0], value, *_arguments(command, model)]
            result = CliRunner().invoke(main, args)
            lines = [line for line in result.output.splitlines() if line]
            assert result.exit_code == 2 and len(lines) == 1, (args, result.output)
            assert lines[0].startswith("workbench: error:") and option.opts[0] in lines[0], (args, lines)
    assert list(data.iterdir()) == []  # no ledger, no lock, no runs


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    from workbench.formats.synth import write_synthetic

    path = tmp_path_factory.mktemp("numbers") / "moe.gguf"
    write_synthetic(path, format="gguf", layout="moe", size=2 << 20, experts=8)
    return path


@pytest.mark.parametrize("args, needle", [
    (["--experts-per-token", "9"], "the model's layers have 8 experts"),
    (["--turns", "100000", "--tokens", "100000"], "routing entries"),
    (["--ab", "turns=1000000000", "--ab", "turns=2"], "turns"),
    (["--ab", "cache_mib=nan", "--ab", "turns=2"], "cache_mib"),
    (["--rounds", "1", "--ab", "lanes=1", "--ab", "experts_per_token=9"], "have 8 experts"),  # no cell of A either
])
def test_a_session_the_model_cannot_make_is_refused_before_its_attempt_is_recorded(tmp_path, moe, args, needle):
    ledger = tmp_path / "ledger.sqlite"
    with defaults.set_data_root(tmp_path):
        result = CliRunner().invoke(main, ["session", str(moe), "--ledger", str(ledger), *args])
    lines = [line for line in result.output.splitlines() if line]
    assert result.exit_code == 2 and len(lines) == 1 and needle in lines[0], result.output
    assert not ledger.exists()


def test_the_cli_and_the_session_config_share_their_bounds():
    from workbench.expert import session_bounds
    from workbench.formats.bounds import MAX_MEMBERS
    from workbench.formats.synth import MAX_EXPERTS

    assert (numbers.MAX_TURNS, numbers.MAX_THREADS, numbers.MAX_EXPERTS, numbers.MAX_MIB, numbers.MAX_SEED) == (
        session_bounds.MAX_TURNS, session_bounds.MAX_THREADS, session_bounds.MAX_EXPERTS, session_bounds.MAX_MIB,
        session_bounds.MAX_SEED)
    assert numbers.MAX_SHARDS == MAX_MEMBERS and numbers.MAX_EXPERTS == MAX_EXPERTS
    assert math.isfinite(numbers.MAX_SECONDS)


@pytest.mark.parametrize("text", ["9" * 400 + "TiB", "9" * 5000, "2000000TiB"])
def test_a_size_no_disk_holds_is_one_line(tmp_path, text):
    result = CliRunner().invoke(main, ["synth", str(tmp_path / "m.gguf"), "--format", "gguf", "--size", text])
    lines = [line for line in result.output.splitlines() if line]
    assert result.exit_code == 2 and len(lines) == 1 and "size" in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("runs", [1_001, 10**9])
def test_the_runner_bounds_its_runs_for_notebooks_and_sweeps_too(tmp_path, runs):
    from workbench.errors import WorkbenchError
    from workbench.formats.synth import write_synthetic
    from workbench.measure.run.runner import measure
    from workbench.records import RunConfig

    model = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="dense", size=1 << 20).path
    ledger = tmp_path / "l.sqlite"
    with pytest.raises(WorkbenchError, match="more than the 1,000"):
        measure([RunConfig(str(model), "pread", {}, "host")], runs=runs, cache="warm", ledger=ledger)
    assert not ledger.exists()


def test_a_usage_error_is_one_line_but_a_group_named_alone_shows_its_help():
    one = CliRunner().invoke(main, ["run"])
    lines = [line for line in one.output.splitlines() if line]
    assert one.exit_code == 2 and len(lines) == 1 and lines[0].startswith("workbench: error: Missing argument 'MODEL'.")
    assert lines[0].endswith(" run --help)")  # the command path as invoked ("workbench run", or CliRunner's "main run")
    for group in ("ledger", "trace"):
        shown = CliRunner().invoke(main, [group])
        assert "Commands:" in shown.output and "\\n" not in shown.output, shown.output
