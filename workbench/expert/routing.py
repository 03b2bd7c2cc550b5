"""Routing traces: which ``k`` experts each decode token uses in each MoE layer.

A :class:`RoutingTrace` is a dense ``(tokens, layers, k)`` array of expert ids plus the model layer
number of each column. Traces come from :func:`synthetic_trace` (seeded; ``uniform``, or ``zipf``
where each layer has its own popularity order and expert of rank ``r`` is chosen with weight
``1 / (r + 1) ** s``; the ``k`` experts of a (token, layer) are distinct, as top-k routing makes them)
or from a file, :func:`load_trace`: CSV rows ``token,layer,expert`` (a header line is optional) or a
``.npy`` integer array of shape ``(N, 3)`` in the same column order (or with fields ``token``,
``layer``, ``expert``). Every (token, layer) must name the same number of distinct experts.
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from workbench.errors import TraceError
from workbench.formats.index import ExpertBlob

DISTRIBUTIONS = ("uniform", "zipf")
_COLUMNS = ("token", "layer", "expert")
_CHUNK_CELLS = 1 << 22  # random scores drawn per chunk of tokens: bounded memory for long traces


@dataclass(frozen=True, eq=False)
class RoutingTrace:
    """``experts[t, i]`` are the ``k`` expert ids token ``t`` uses in model layer ``layers[i]``."""

    experts: np.ndarray  # (tokens, len(layers), k), int32, read-only
    layers: tuple[int, ...]
    n_experts: int
    source: str  # "uniform seed=0", "zipf s=1.2 seed=0", or the file it came from

    @property
    def tokens(self) -> int:
        return int(self.experts.shape[0])

    @property
    def k(self) -> int:
        return int(self.experts.shape[2])

    def token(self, t: int) -> np.ndarray:
        """Token ``t``'s routing, ``(layers, k)``; a trace shorter than the session replays from the start."""
        return self.experts[t % self.tokens]


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


def load_trace(path: str | os.PathLike, *, layers: Sequence[int] | None = None,
               n_experts: int | None = None) -> RoutingTrace:
    """Read a CSV or ``.npy`` trace; with ``layers``/``n_experts`` (the model's), check it fits them.

    Raises :class:`TraceError` with one line naming the file, the row or token, and the problem.
    """
    path = os.fspath(path)
    rows = _read_npy(path) if path.endswith(".npy") else _read_csv(path)
    return _to_trace(path, rows, layers, n_experts)


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


def _read_csv(path: str) -> np.ndarray:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return np.array(list(_csv_rows(path, csv.reader(fh))), dtype=np.int64).reshape(-1, 3)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None


def _csv_rows(path: str, reader: Iterable[list[str]]) -> Iterable[tuple[int, int, int]]:
    for line, row in enumerate(reader, start=1):
        cells = [c.strip() for c in row]
        if not cells or cells == [""]:
            continue
        if line == 1 and [c.lower() for c in cells] == list(_COLUMNS):
            continue
        if len(cells) != 3 or not all(c.isascii() and c.isdigit() for c in cells):
            raise TraceError(path, f"line {line}: expected three non-negative integers token,layer,expert; "
                                   f"got {','.join(row)!r}")
        yield int(cells[0]), int(cells[1]), int(cells[2])


def _read_npy(path: str) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise TraceError(path, f"not a readable .npy array: {exc}") from None
    if arr.dtype.names and set(_COLUMNS) <= set(arr.dtype.names):
        arr = np.stack([arr[c] for c in _COLUMNS], axis=-1).reshape(-1, 3)
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[1] != 3:
        raise TraceError(path, f"expected an integer array of shape (N, 3) (token, layer, expert), "
                               f"got {arr.dtype} {arr.shape}")
    if arr.size and arr.min() < 0:
        row = int(np.argwhere(arr < 0)[0][0])
        raise TraceError(path, f"row {row}: negative id in {arr[row].tolist()}")
    return arr.astype(np.int64)


def _to_trace(path: str, rows: np.ndarray, layers: Sequence[int] | None, n_experts: int | None) -> RoutingTrace:
    if not len(rows):
        raise TraceError(path, "empty trace: no token,layer,expert rows")
    token_ids, t_idx = np.unique(rows[:, 0], return_inverse=True)
    layer_ids, l_idx = np.unique(rows[:, 1], return_inverse=True)
    _check_layers(path, tuple(int(x) for x in layer_ids), layers)
    top = int(rows[:, 2].max())
    if n_experts is not None and top >= n_experts:
        row = int(np.argmax(rows[:, 2]))
        raise TraceError(path, f"row {row}: expert {top} out of range (the model has {n_experts} experts per layer)")
    group = t_idx.ravel() * len(layer_ids) + l_idx.ravel()
    counts = np.bincount(group, minlength=len(token_ids) * len(layer_ids))
    if counts.min() != counts.max():
        bad = int(np.argmin(counts) if counts.min() != counts[0] else np.argmax(counts))
        t, li = divmod(bad, len(layer_ids))
        raise TraceError(path, f"token {int(token_ids[t])} layer {int(layer_ids[li])} routes {int(counts[bad])} experts, "
                               f"token {int(token_ids[0])} layer {int(layer_ids[0])} routes {int(counts[0])} "
                               f"(every token needs the same k in every layer)")
    order = np.lexsort((np.arange(len(rows)), group))  # by (token, layer), keeping the file's expert order
    experts = rows[order, 2].reshape(len(token_ids), len(layer_ids), int(counts[0])).astype(np.int32)
    dup = np.argwhere((np.diff(np.sort(experts, axis=2), axis=2) == 0).any(axis=2))
    if len(dup):
        t, li = dup[0]
        raise TraceError(path, f"token {int(token_ids[t])} layer {int(layer_ids[li])} names an expert twice: "
                               f"{experts[t, li].tolist()}")
    experts.setflags(write=False)
    return RoutingTrace(experts, tuple(int(x) for x in layer_ids), n_experts or top + 1, path)


def _check_layers(path: str, found: tuple[int, ...], model: Sequence[int] | None) -> None:
    if model is None or set(found) == set(model):
        return
    missing, extra = sorted(set(model) - set(found)), sorted(set(found) - set(model))
    detail = f"missing MoE layers {_brief(missing)}" if missing else ""
    detail += ("; " if detail else "") + (f"layers {_brief(extra)} are not MoE layers of the model" if extra else "")
    raise TraceError(path, f"trace does not match the model: {detail}")


def _brief(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:6])) + (f" … ({len(ids)} in all)" if len(ids) > 6 else "")
