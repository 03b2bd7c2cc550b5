"""Routing traces: which ``k`` experts each decode token uses in each MoE layer.

A :class:`RoutingTrace` is a dense ``(tokens, layers, k)`` array of expert ids plus the model layer
number of each column. Traces come from :func:`synthetic_trace` (seeded; ``uniform``, or ``zipf``
where each layer has its own popularity order and expert of rank ``r`` is chosen with weight
``1 / (r + 1) ** s``; the ``k`` experts of a (token, layer) are distinct, as top-k routing makes them)
or from a file, :func:`load_trace` (every format of :mod:`workbench.expert.traces`: CSV, JSONL, ``.npy``
rows or ``[tokens, layers, k]``), made dense by the gap rule of
:func:`~workbench.expert.traces.dense_routing`. Every (token, layer) names the same number of distinct experts.
"""
from __future__ import annotations

import csv
import os
from dataclasses import replace
from typing import Sequence

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.dense import RoutingTrace, dense_routing
from workbench.expert.traces.read import read_trace
from workbench.expert.traces.sticky import as_trace, is_model_file, load_model
from workbench.formats.index import ExpertBlob

DISTRIBUTIONS = ("uniform", "zipf")
_COLUMNS = ("token", "layer", "expert")  # what save_trace writes
_CHUNK_CELLS = 1 << 22  # random scores drawn per chunk of tokens: bounded memory for long traces


def moe_shape(blobs: Sequence[ExpertBlob]) -> tuple[tuple[int, ...], int]:
    """(MoE layer numbers, experts per layer) of a model; the smallest expert count if they differ."""
    if not blobs:
        raise TraceError("model", "has no expert blobs: nothing to route")
    return tuple(sorted({b.layer for b in blobs})), min(b.n_experts for b in blobs)


def synthetic_trace(tokens: int, layers: Sequence[int] | int, n_experts: int, k: int, *,
                    distribution: str = "uniform", zipf_s: float = 1.2, seed: int = 0) -> RoutingTrace:
    """A seeded trace: same arguments, same trace. ``layers`` is a count or the layer numbers."""
    layer_ids = tuple(range(layers)) if isinstance(layers, int) else tuple(int(x) for x in layers)
    _check_synthetic(tokens, layer_ids, n_experts, k, distribution, zipf_s)
    rng = np.random.default_rng(seed)
    log_w = np.zeros((len(layer_ids), n_experts))
    source = f"uniform seed={seed}"
    if distribution == "zipf":
        rank_w = -zipf_s * np.log(np.arange(1, n_experts + 1))
        log_w = np.stack([rank_w[rng.permutation(n_experts)] for _ in layer_ids])  # hot experts differ per layer
        source = f"zipf s={zipf_s:g} seed={seed}"
    out = np.empty((tokens, len(layer_ids), k), dtype=np.int32)
    step = max(1, _CHUNK_CELLS // (len(layer_ids) * n_experts))
    for t0 in range(0, tokens, step):
        n = min(step, tokens - t0)
        # Gumbel top-k: the k largest of log-weight + Gumbel noise are k draws without replacement
        scores = log_w + rng.gumbel(size=(n, len(layer_ids), n_experts))
        top = np.argpartition(-scores, k - 1, axis=2)[..., :k]
        out[t0:t0 + n] = top
    out.setflags(write=False)
    return RoutingTrace(out, layer_ids, n_experts, source)


def _check_synthetic(tokens: int, layers: tuple[int, ...], n_experts: int, k: int, distribution: str,
                     zipf_s: float) -> None:
    where = "synthetic trace"
    if distribution not in DISTRIBUTIONS:
        raise TraceError(where, f"distribution {distribution!r} is not one of {', '.join(DISTRIBUTIONS)}")
    if tokens < 1 or not layers or n_experts < 1:
        raise TraceError(where, f"needs tokens, layers and experts >= 1 (got {tokens}, {len(layers)}, {n_experts})")
    if not 1 <= k <= n_experts:
        raise TraceError(where, f"k={k} experts per token must be in [1, {n_experts}]")
    if distribution == "zipf" and not zipf_s > 0:
        raise TraceError(where, f"zipf exponent s={zipf_s} must be > 0")


def load_trace(path: str | os.PathLike, *, layers: Sequence[int] | None = None, n_experts: int | None = None,
               tokens: int | None = None, seed: int = 0) -> RoutingTrace:
    """Read a trace file (any format of :func:`~workbench.expert.traces.read_trace`) in the dense form a
    session replays; with ``layers``/``n_experts`` (the model's), check it fits them (the gap rule:
    :func:`~workbench.expert.traces.dense_routing`). A routing-model file (``.json``, written by
    ``workbench trace fit``) is synthesized instead: ``tokens`` tokens (default 1,024) with ``seed``.

    Raises :class:`TraceError` with one line naming the file, the row or token, and the problem.
    """
    if is_model_file(path):
        model = load_model(path)
        synth = as_trace(model.synthesize(tokens or 1024, seed=seed))
        fitted = dense_routing(replace(synth, source=os.fspath(path), layer_kind=model.layer_kind), layers=layers,
                               n_experts=n_experts)
        return replace(fitted, source=f"{os.fspath(path)} (fitted model, seed={seed})")
    return dense_routing(read_trace(path), layers=layers, n_experts=n_experts)


def save_trace(trace: RoutingTrace, path: str | os.PathLike) -> None:
    """Write ``trace`` as CSV (with a header) or ``.npy`` ``(N, 3)`` rows, by the path's suffix."""
    t, i, j = np.indices(trace.experts.shape)
    rows = np.stack([t.ravel(), np.asarray(trace.layers)[i.ravel()], trace.experts.ravel()], axis=1)
    path = os.fspath(path)
    if path.endswith(".npy"):
        np.save(path, rows.astype(np.int64))
        return
    with open(path, "w", newline="", encoding="ascii") as fh:
        writer = csv.writer(fh)
        writer.writerow(_COLUMNS)
        writer.writerows(rows.tolist())
