"""JSONL traces: one record a line per (token, layer), the common research dump of a router hook —
``{"layer": 3, "token": 17, "experts": [5, 1], "gating_probs": [0.61, 0.22]}``.

Accepted spellings: the layer ``layer`` | ``layer_idx`` | ``layer_id``; the token position ``token`` |
``token_pos`` | ``token_idx``; the experts ``experts`` | ``topk_ids`` | ``expert_ids``; the gate weights
(optional, all records or none) ``gating_probs`` | ``topk_weights`` | ``gates``; the request (optional)
``request_id`` | ``seq_id`` | ``request``. Other keys are ignored. A dump of several requests is laid
out request after request (in the order each first appears), one token position apart, so each request
is a run of its own: no statistic looks across two requests, and a session replays them one after another.
Each line is read bounded (:data:`~workbench.expert.traces.limits.MAX_LINE_BYTES`) and each value checked
(an integer within its limit, ``k`` the same on every line, gates finite) before it is kept.
"""
from __future__ import annotations

import json
import math
from array import array

import numpy as np

from workbench.errors import TraceError
from workbench.expert.traces.build import trace_from_records
from workbench.expert.traces.limits import (MAX_EXPERTS, MAX_K, MAX_LAYER, MAX_LINE_BYTES, MAX_POSITION,
                                            check_ids)
from workbench.expert.traces.trace import Trace

LAYER_KEYS = ("layer", "layer_idx", "layer_id")
TOKEN_KEYS = ("token", "token_pos", "token_idx")
EXPERT_KEYS = ("experts", "topk_ids", "expert_ids")
GATE_KEYS = ("gating_probs", "topk_weights", "gates")
REQUEST_KEYS = ("request_id", "seq_id", "request")
_MAX_REQUEST_ID = 200  # characters of a request id kept to tell requests apart


class _Columns:
    """What the records said so far, in compact arrays (8 bytes an id, 4 a gate)."""

    def __init__(self) -> None:
        self.pos, self.layer, self.experts, self.gates = array("q"), array("q"), array("q"), array("f")
        self.request, self.requests = array("q"), {}  # each record's request: its index in order of appearance
        self.k: int | None = None
        self.has_gates: bool | None = None


def read_jsonl(path: str) -> Trace:
    """The trace in ``path``; :class:`TraceError` (one line) for anything else."""
    cols = _Columns()
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), start=1):
                if len(line) > MAX_LINE_BYTES:
                    raise TraceError(path, f"line {number}: longer than {MAX_LINE_BYTES:,} bytes")
                if line.strip():
                    _add(path, number, _parse(path, number, line), cols)
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if cols.k is None:
        raise TraceError(path, "empty trace: no routing records")
    k = cols.k
    experts = np.frombuffer(cols.experts, np.int64).reshape(-1, k)
    gates = np.frombuffer(cols.gates, np.float32).reshape(-1, k) if cols.has_gates else None
    return trace_from_records(path, _end_to_end(path, cols), np.frombuffer(cols.layer, np.int64), experts, gates)


def _end_to_end(path: str, cols: _Columns) -> np.ndarray:
    """Token positions with the requests laid end to end, one position apart (a gap between runs)."""
    pos, req = np.frombuffer(cols.pos, np.int64), np.frombuffer(cols.request, np.int64)
    if len(cols.requests) <= 1:
        return pos
    last = np.zeros(len(cols.requests), np.int64)
    np.maximum.at(last, req, pos)
    base = np.concatenate([[0], np.cumsum(last + 2)[:-1]])
    if base[-1] + last[-1] >= MAX_POSITION:
        raise TraceError(path, f"{len(cols.requests)} requests of up to {int(last.max()) + 1} tokens: positions "
                               f"beyond {MAX_POSITION - 1}")
    return base[req] + pos


def _parse(path: str, number: int, line: bytes) -> dict:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise TraceError(path, f"line {number}: not a JSON record ({type(exc).__name__})") from None
    if not isinstance(record, dict):
        raise TraceError(path, f"line {number}: expected a JSON object, got {type(record).__name__}")
    return record


def _add(path: str, number: int, record: dict, cols: _Columns) -> None:
    where = f"line {number}"
    layer = _integer(path, where, "layer", _field(path, where, record, LAYER_KEYS), MAX_LAYER)
    pos = _integer(path, where, "token", _field(path, where, record, TOKEN_KEYS), MAX_POSITION)
    experts = _field(path, where, record, EXPERT_KEYS)
    if not isinstance(experts, list) or not 1 <= len(experts) <= MAX_K:
        raise TraceError(path, f"{where}: experts must be a list of 1 .. {MAX_K} expert ids")
    if cols.k is None:
        cols.k = len(experts)
        cols.has_gates = any(key in record for key in GATE_KEYS)
    if len(experts) != cols.k:
        raise TraceError(path, f"{where}: {len(experts)} experts where the first record routes {cols.k} "
                               "(every token needs the same k in every layer)")
    ids = [_integer(path, where, "expert", e, MAX_EXPERTS) for e in experts]
    if cols.has_gates:
        cols.gates.extend(_gates(path, where, record, cols.k))
    elif any(key in record for key in GATE_KEYS):
        raise TraceError(path, f"{where}: has gate weights where the first record has none (all records or none)")
    request = next((record[key] for key in REQUEST_KEYS if key in record), None)
    if request is not None and not isinstance(request, (str, int)):
        raise TraceError(path, f"{where}: request id must be a string or an integer")
    cols.request.append(cols.requests.setdefault(str(request)[:_MAX_REQUEST_ID], len(cols.requests)))
    cols.pos.append(pos)
    cols.layer.append(layer)
    cols.experts.extend(ids)
    check_ids(path, "records", len(cols.experts))


def _field(path: str, where: str, record: dict, keys: tuple[str, ...]) -> object:
    for key in keys:
        if key in record:
            return record[key]
    raise TraceError(path, f"{where}: no {' / '.join(keys)} field")


def _integer(path: str, where: str, name: str, value: object, limit: int) -> int:
    if type(value) is not int or not 0 <= value < limit:  # bool is not an id; a float is not either
        shown = repr(value)[:40]
        raise TraceError(path, f"{where}: {name} {shown} is not an integer in 0 .. {limit - 1}")
    return value


def _gates(path: str, where: str, record: dict, k: int) -> list[float]:
    gates = _field(path, where, record, GATE_KEYS)
    if (not isinstance(gates, list) or len(gates) != k
            or not all(type(g) in (int, float) and math.isfinite(g) and abs(g) < 1e30 for g in gates)):
        raise TraceError(path, f"{where}: gate weights must be a list of {k} finite numbers "
                               "(all records have them or none)")
    return [float(g) for g in gates]
