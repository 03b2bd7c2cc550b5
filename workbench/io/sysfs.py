"""A value read from /proc or /sys, and what a setting reads when it cannot be read: ``unknown (why)``.

Shared by :mod:`workbench.io.machine` (storage, memory, CPU, kernel) and :mod:`workbench.io.gpu_settings`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def unknown(why: str) -> str:
    """The value of a setting that could not be read, with why."""
    return f"unknown ({why})"


def is_unknown(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("unknown")


def read_text(path: str | Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read().strip()


def read_or_unknown(path: str | Path, what: str) -> str:
    try:
        return read_text(path)
    except OSError as exc:
        return unknown(f"{what}: {path}: {exc.strerror or exc}")
