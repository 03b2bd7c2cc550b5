"""The two primitives every getter and ``set_*`` context manager of :mod:`workbench.settings.defaults` is written
over: read one variable, set one for a block. Import the settings from :mod:`workbench.settings.defaults`."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


@contextmanager
def _setenv(name: str, value: str | None) -> Iterator[None]:
    """``name`` = ``value`` (None: unset) for the block, then whatever it was before."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
