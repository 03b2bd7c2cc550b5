"""Writing a (synthesized) routing trace as a file every reader here reads back, and engines' tools too."""
from __future__ import annotations

import io
import os

import numpy as np

from workbench.expert.traces.dense import RoutingTrace


def trace_bytes(trace: RoutingTrace, path: str | os.PathLike) -> bytes:
    """``trace`` in the format ``path``'s suffix names: ``.npy`` ``(N, 3)`` int64 rows, ``.jsonl``
    records (gate weights where the trace has them), else CSV with a ``token,layer,expert`` header —
    each keeping the model's layer numbers."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    t, i, j = np.indices(trace.experts.shape)
    layers = np.asarray(trace.layers, dtype=np.int64)
    if suffix == ".npy":
        rows = np.stack([t.ravel(), layers[i.ravel()], trace.experts.ravel()], axis=1).astype(np.int64)
        buf = io.BytesIO()
        np.save(buf, rows)
        return buf.getvalue()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl(trace, layers).encode("ascii")
    rows = np.stack([t.ravel(), layers[i.ravel()], trace.experts.ravel()], axis=1)
    buf = io.StringIO()
    buf.write("token,layer,expert\n")
    np.savetxt(buf, rows, fmt="%d", delimiter=",")
    return buf.getvalue().encode("ascii")


def _jsonl(trace: RoutingTrace, layers: np.ndarray) -> str:
    lines = []
    for t in range(trace.tokens):
        for i, layer in enumerate(layers):
            gates = "" if trace.gates is None else \
                ', "gating_probs": [' + ", ".join(f"{g:.6g}" for g in trace.gates[t, i]) + "]"
            lines.append(f'{{"layer": {layer}, "token": {t}, "experts": [{", ".join(map(str, trace.experts[t, i]))}]'
                         f"{gates}}}\n")
    return "".join(lines)
