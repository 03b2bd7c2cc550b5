"""An external engine's command, checked before anything runs: its argument list, its markers and
phase patterns, and the files that identify the build it runs (:mod:`workbench.measure.engine.build`).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Sequence

from workbench.errors import ParamError
from workbench.measure.engine.build import build_files, check_build, describe_build, identify
from workbench.measure.engine.spec import EngineCommand

__all__ = ["EngineCommand", "Patterns", "build_files", "check_command", "compile_pattern", "compile_patterns",
           "default_labels", "describe_build", "identify", "short_hash"]

@dataclass(frozen=True)
class Patterns:
    """A command's regular expressions, compiled once."""

    marker: re.Pattern[str]
    start: re.Pattern[str] | None
    phases: tuple[re.Pattern[str], ...]


def compile_pattern(text: str, option: str = "--marker") -> re.Pattern[str]:
    """A regular expression, or a ParamError naming the option and the pattern."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ParamError(option, text, f"not a regular expression ({exc})") from None


def compile_patterns(command: EngineCommand) -> Patterns:
    """The marker, start marker and phase patterns; a phase needs groups ``name`` and ``ms`` or ``s``."""
    phases = []
    for text in command.phases:
        pattern = compile_pattern(text, "--phase")
        groups = set(pattern.groupindex)
        if "name" not in groups or len(groups & {"ms", "s"}) != 1:
            raise ParamError("--phase", text, "needs the named groups (?P<name>…) and one of (?P<ms>…) "
                             "or (?P<s>…), e.g. '(?P<name>weight sweep): (?P<ms>[0-9.]+) ms'")
        phases.append(pattern)
    start = compile_pattern(command.start_marker, "--start-marker") if command.start_marker else None
    return Patterns(compile_pattern(command.marker), start, tuple(phases))


def check_command(command: EngineCommand, timeout_s: float | None = None) -> tuple[Patterns, list[tuple[str, str]]]:
    """Everything that can be refused before a run: quoting, patterns, the build's files (and that
    they can be read and hashed, within ``timeout_s``)."""
    if not command.shell:
        command.argv()
    patterns = compile_patterns(command)
    return patterns, check_build(command, timeout_s)


def default_labels(commands: Sequence[EngineCommand]) -> list[str]:
    """A label for each command: its own, else what tells it from the others (``--read heap`` against
    ``--read mmap``: the words all commands share at the start and end dropped, an option name kept
    with its value), else its shortened command line; identical ones get ``#k``."""
    words = [_words(c.cmd) for c in commands]
    head = _common_length(words)
    tail = _common_length([w[head:][::-1] for w in words])
    if head and any(w[head - 1].startswith("-") for w in words[:1]):
        head -= 1  # keep the option whose value differs: "--read heap", not "heap"
    distinct = [" ".join(w[head:len(w) - tail]) for w in words]
    useful = len(commands) > 1 and len(set(distinct)) > 1  # identical commands (an A/A) keep their text
    labels = [c.label or (d if useful and d else c.display()) for c, d in zip(commands, distinct)]
    return [f"{label} #{labels[:i].count(label) + 1}" if labels.count(label) > 1 else label
            for i, label in enumerate(labels)]


def _words(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError:
        return [cmd]


def _common_length(lists: Sequence[Sequence[str]]) -> int:
    """How many leading items every list shares (never all of the shortest: something must remain)."""
    shortest = min(len(w) for w in lists) if lists else 0
    n = 0
    while n < shortest - 1 and all(w[n] == lists[0][n] for w in lists):
        n += 1
    return n


def short_hash(value: str | None, width: int = 8) -> str:
    """``xxh3_128:1a2b3c4d…`` → ``1a2b3c4d``; '' for None."""
    return "" if not value else str(value).rpartition(":")[2][:width]
