"""Files a run makes beside a model (scratch data, a swap file), named after their runner so that the
next run can remove what a killed one left.

``make_scratch(directory, kind)`` creates ``.wb-<kind>-<pid>-<start ticks>-<host>-<boot>-<hex>``
(``O_EXCL``, ``O_NOFOLLOW``, mode 0600) after removing every ``.wb-<kind>-*`` regular file in
``directory`` whose runner is gone — the one mechanism of :mod:`workbench.output.owned`, judged as the ledger
judges an abandoned attempt. A run that ends deletes its file itself; a run killed with SIGKILL cannot,
and the next one does. A file named otherwise is never touched.
"""
from __future__ import annotations

import os
from typing import Callable

from workbench.output import owned


def owned_name(kind: str) -> str:
    """``.wb-<kind>-<pid>-<start ticks>-<host>-<boot>-<hex>`` for this process."""
    return owned.owned_name(f".wb-{kind}-")


def reap_owned(directory: str | os.PathLike[str], kind: str,
               before: Callable[[str], None] = lambda _p: None) -> tuple[str, ...]:
    """Delete every ``.wb-<kind>-*`` in ``directory`` whose runner is gone (``before(path)`` first);
    returns their paths."""
    return owned.reap_owned(directory, f".wb-{kind}-", before=before)


def make_scratch(directory: str | os.PathLike[str], kind: str) -> tuple[int, str]:
    """(descriptor open for writing, path) of a new owner-named file in ``directory`` (see the doc)."""
    return owned.make_owned(directory, f".wb-{kind}-")
