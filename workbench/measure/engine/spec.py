"""One engine to time, as its options say it: the command, its markers and phase patterns, its label.

Below both :mod:`workbench.measure.engine.build` (which files identify the build it runs) and
:mod:`workbench.measure.engine.command` (everything checked before a run), which read it.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from workbench.errors import ParamError

LABEL_WIDTH = 60


@dataclass(frozen=True)
class EngineCommand:
    """One engine to time: ``cmd`` run as an argument list (or by ``/bin/sh`` when ``shell``), the clock
    stopped at the first output line matching ``marker``; ``start_marker`` starts it (else: spawn);
    ``phases`` are patterns of the engine's own phase lines; ``binary`` overrides what identifies it;
    ``expect_exit`` is the exit status that is no failure when it exits on its own after the marker."""

    cmd: str
    marker: str
    start_marker: str | None = None
    phases: tuple[str, ...] = ()
    shell: bool = False
    binary: str | None = None
    label: str = ""
    expect_exit: int | None = None  # the exit status accepted when it exits after the marker (None: 0)

    def argv(self) -> list[str]:
        """The argument list (shell quoting rules); a quoting error is a one-line ParamError."""
        try:
            words = shlex.split(self.cmd)
        except ValueError as exc:
            raise ParamError("--cmd", self.cmd, f"not a valid argument list ({exc}); "
                             "quote it as a shell would, or pass --shell") from None
        if not words:
            raise ParamError("--cmd", self.cmd, "empty command")
        return words

    def params(self) -> dict[str, Any]:
        """What the attempt records as its parameters (only what was set)."""
        out: dict[str, Any] = {"cmd": self.cmd, "marker": self.marker}
        if self.start_marker:
            out["start_marker"] = self.start_marker
        if self.phases:
            out["phases"] = list(self.phases)
        if self.shell:
            out["shell"] = True
        if self.binary:
            out["binary"] = self.binary
        if self.expect_exit is not None:
            out["expect_exit"] = self.expect_exit
        return out

    def display(self) -> str:
        """The label, else the command with paths shortened to their file names."""
        if self.label:
            return self.label
        try:
            words = [os.path.basename(w) if os.path.isabs(w) else w for w in shlex.split(self.cmd)]
        except ValueError:
            words = [self.cmd]
        text = " ".join(words)
        if len(text) <= LABEL_WIDTH:
            return text
        half = (LABEL_WIDTH - 1) // 2
        return f"{text[:half]}…{text[-half:]}"
