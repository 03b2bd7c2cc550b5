"""Options given more than once: never dropped silently.

click keeps the *last* value of an option that is not ``multiple``, so ``--cache cold --cache warm``
used to measure warm only. Every group of the CLI resolves its subcommands through
:class:`RefuseRepeats`, which fails in one line when an option that takes one value is given twice;
options that are ``multiple`` use every value, and :func:`refuse_duplicates` refuses the same value
twice where measuring it twice would mean nothing.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

import click

from workbench.errors import ParamError


class RefuseRepeats:
    """Mixin for a ``click.Group``: check each subcommand's arguments before click parses them."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, ...]:
        name, command, rest = super().resolve_command(ctx, args)  # type: ignore[misc]
        if command is not None:
            refuse_repeated(command, ctx, name or command.name or "", rest)
            ctx.meta["workbench.argv"] = list(rest)  # the subcommand's own words, to print a resume line
        return name, command, rest


def refuse_repeated(command: click.Command, parent: click.Context, name: str, args: Sequence[str]) -> None:
    """Raise a :class:`ParamError` naming the first option of ``command`` that takes one value and is
    given more than once in ``args``. Arguments click cannot parse are left to click to report."""
    probe = click.Context(command, info_name=name, parent=parent, resilient_parsing=True)
    parser = command.make_parser(probe)
    try:
        _, _, order = parser.parse_args(list(args))
    except click.UsageError:
        return
    seen = Counter(p for p in order if isinstance(p, click.Option) and not p.multiple and not p.count)
    for option, times in seen.items():
        if times > 1:
            spelled = "/".join(option.opts + option.secondary_opts)
            raise ParamError(f"workbench {_path(parent, name)}", spelled,
                             f"given {times} times, but it is not repeatable (only the last would count)")


def refuse_duplicates(owner: str, option: str, values: Iterable[Any]) -> None:
    """One line when a repeatable option names the same value twice (``--cache warm --cache warm``)."""
    counts = Counter(values)
    twice = [str(v) for v, n in counts.items() if n > 1]
    if twice:
        raise ParamError(owner, option, f"{', '.join(twice)} given more than once")


def _path(parent: click.Context, name: str) -> str:
    words = []
    ctx: click.Context | None = parent
    while ctx is not None and ctx.parent is not None:  # skip the root ("workbench")
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join([*reversed(words), name]).strip()
