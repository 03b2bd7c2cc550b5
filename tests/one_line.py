"""What "one line, never a traceback" means in a test: a refusal raised within 1 s of CPU, and a
command's answer of exactly one line, exit 2, holding what it must name."""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest


def refused_within_a_second(call: Callable[[], Any], error: type[BaseException], *needles: str) -> str:
    """``call()`` raises ``error`` within 1 s of this process's CPU (CPU, not wall: the VM is shared), its
    message one line holding every needle; returns the message."""
    start = time.process_time()
    with pytest.raises(error) as err:
        call()
    assert time.process_time() - start < 1.0
    text = str(err.value)
    assert "\n" not in text and all(n in text for n in needles), text
    return text


def one_error_line(result: Any, *needles: str) -> None:
    """A CliRunner result that is one non-empty line, exit 2, no traceback, holding every needle."""
    lines = [line for line in result.output.splitlines() if line]
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert all(n in lines[0] for n in needles), lines
