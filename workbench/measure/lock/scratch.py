"""Files a run makes beside a model (scratch data, a swap file), named after their runner so that the
next run can remove what a killed one left.

``make_scratch(directory, kind)`` creates ``.wb-<kind>-<pid>-<start ticks>-<hex>`` (``O_EXCL``,
``O_NOFOLLOW``, mode 0600) after removing every ``.wb-<kind>-*`` in ``directory`` whose runner is gone
— judged as the ledger judges an abandoned attempt (:func:`workbench.ledger.owner.owner_state`: same
host, boot and pid namespace, and no process with that pid and start time). A run that ends deletes
its file itself; a run killed with SIGKILL cannot, and the next one does. A file named otherwise is
never touched.
"""
from __future__ import annotations

import os
import re
from typing import Callable


def owned_name(kind: str) -> str:
    """``.wb-<kind>-<pid>-<start ticks>-<hex>`` for this process."""
    from workbench.ledger.owner import current_owner

    me = current_owner()
    return f".wb-{kind}-{me.pid}-{me.start_ticks}-{os.urandom(3).hex()}"


def reap_owned(directory: str | os.PathLike[str], kind: str,
               before: Callable[[str], None] = lambda _p: None) -> tuple[str, ...]:
    """Delete every ``.wb-<kind>-*`` in ``directory`` whose runner is gone (``before(path)`` first);
    returns their paths."""
    from workbench.ledger.owner import GONE, Owner, current_owner, owner_state

    pattern = re.compile(rf"\.wb-{re.escape(kind)}-(\d+)-(\d+)-[0-9a-f]{{6}}")
    here, gone = current_owner(), []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return ()
    for name in names:
        match = pattern.fullmatch(name)
        if match and owner_state(Owner(here.host, here.boot_id, here.pid_ns, int(match[1]), int(match[2])),
                                 here) == GONE:
            path = os.path.join(directory, name)
            before(path)
            try:
                os.unlink(path)
                gone.append(path)
            except OSError:
                pass
    return tuple(gone)


def make_scratch(directory: str | os.PathLike[str], kind: str) -> tuple[int, str]:
    """(descriptor open for writing, path) of a new owner-named file in ``directory`` (see the doc)."""
    reap_owned(directory, kind)
    path = os.path.join(os.fspath(directory), owned_name(kind))
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), path
