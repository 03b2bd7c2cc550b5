"""One entry for every trace file: the format is chosen by the name's suffix."""
from __future__ import annotations

import os
import stat

from workbench.errors import TraceError
from workbench.expert.traces.jsonl import read_jsonl
from workbench.expert.traces.npy import read_npy
from workbench.expert.traces.text import read_csv
from workbench.expert.traces.trace import Trace

FORMATS = {".npy": "numpy array", ".jsonl": "JSON lines", ".ndjson": "JSON lines", ".csv": "CSV"}


def read_trace(path: str | os.PathLike) -> Trace:
    """The trace in ``path``: ``.npy`` (``(N, 3)`` rows or ``[tokens, layers, k]``), ``.jsonl`` /
    ``.ndjson`` (one record per token and layer), anything else CSV ``token,layer,expert``.

    Raises :class:`~workbench.errors.TraceError`: one line naming the file and the problem.
    """
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):  # a FIFO would block, a device never end
        raise TraceError(path, "not a regular file: a trace is a file")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".json":
        raise TraceError(path, "a .json file is a routing model (trace fit's parameters), not a trace: "
                               "session --trace synthesizes from it; trace fit --write-trace writes a trace")
    if suffix == ".npy":
        return read_npy(path)
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(path)
    return read_csv(path)
