"""Experts computed on the host where they lie: an expert's matrix–vector products for batch 1, read
straight from the model file's mapping (the page cache), never staged into the expert cache.

Each blob's expert slice is one matrix (rows × cols, numpy order: the file's innermost dimension is
``cols``), multiplied by a fixed right-hand vector of ``cols`` f32 values (seeded per blob). The bytes
are taken as the file stores them and widened to f32 where numpy has no fast product for them:

* ``F32`` — as it is (BLAS);
* ``F16`` — widened to f32 (numpy's f16 product runs its own loops, ~50× slower than BLAS);
* ``BF16`` — numpy has no bf16: the uint16 bits shifted into the high half of a uint32, viewed as f32
  (exact: bf16 is f32's top half);
* GGUF quantized types — dequantized by gguf-py (:func:`gguf.quants.dequantize`) into f32: whatever
  gguf-py can dequantize (Q4_0, Q8_0, the K-quants, IQ*, …). A type it cannot is refused in one line
  when the session opens (:class:`~workbench.errors.ParamError`), before any turn.

The product is what llama.cpp's CPU path and Fiddler compute per routed expert at batch 1 (a
``W @ x`` per projection); the gate/up/down chaining between projections is left out, as the device
compute leaves it out (:mod:`workbench.expert.compute`), so host and device run the same products.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.formats.index import ExpertBlob, TensorInfo
from workbench.formats.opening import open_regular

_PLAIN = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_HOW = {"F32": "as it is", "F16": "widened to f32", "BF16": "widened to f32 by its bits"}


@dataclass(frozen=True)
class HostMatrix:
    """How one blob's expert slice is multiplied on the host."""

    rows: int
    cols: int
    dtype: str  # as the file stores it: F32, F16, BF16, Q4_0, …
    row_bytes: int  # bytes of one stored row (a quantized row: its blocks)


def blob_shape(blob: ExpertBlob, tensors: Mapping[str, TensorInfo]) -> tuple[int, int, str]:
    """(rows, cols, file dtype) of one expert of ``blob`` (a stacked tensor's leading dim is the expert)."""
    t = tensors[blob.tensors[0]]
    shape = t.shape[1:] if len(blob.tensors) == 1 and len(t.shape) > 1 else t.shape
    if len(shape) == 1:
        return 1, int(shape[0]), t.dtype.upper()
    cols = int(shape[-1])
    rows = int(np.prod([int(s) for s in shape[:-1]]))
    return rows, cols, t.dtype.upper()


def host_matrix(blob: ExpertBlob, tensors: Mapping[str, TensorInfo], path: str) -> HostMatrix:
    """The host product of ``blob``'s experts, or a one-line ParamError naming the file and the type."""
    rows, cols, dtype = blob_shape(blob, tensors)
    nbytes = blob.slices[0][1]
    if dtype in _PLAIN:
        row_bytes = cols * _PLAIN[dtype].itemsize
    else:
        qtype = _gguf_qtype(dtype)
        if qtype is None:
            raise ParamError("session", "miss", f"{path}: {blob.tensors[0]} is {dtype}, which neither numpy nor "
                                                "gguf-py can turn into numbers: --miss host/auto cannot compute it "
                                                "(--miss fetch can)")
        block, size = _quant_sizes(qtype)
        if cols % block:
            raise ParamError("session", "miss", f"{path}: {blob.tensors[0]} rows of {cols} are not whole "
                                                f"{dtype} blocks of {block}")
        row_bytes = cols // block * size
    if rows * row_bytes != nbytes:
        raise ParamError("session", "miss", f"{path}: {blob.tensors[0]} expert slices are {nbytes} B, not "
                                            f"{rows} x {cols} {dtype} ({rows * row_bytes} B)")
    return HostMatrix(rows, cols, dtype, row_bytes)


def check_host_computable(index: Any) -> list[HostMatrix]:
    """Every expert blob of ``index`` as the host would multiply it; the first that cannot be, one line."""
    tensors = {t.name: t for t in index.tensors}
    return [host_matrix(b, tensors, b.file or str(index.path)) for b in index.blobs]


def widen(raw: np.ndarray, m: HostMatrix) -> np.ndarray:
    """The expert's bytes (uint8, ``rows * row_bytes``) as a rows × cols f32 matrix."""
    if m.dtype == "F32":
        return raw.view("<f4").reshape(m.rows, m.cols)
    if m.dtype == "F16":
        return raw.view("<f2").reshape(m.rows, m.cols).astype(np.float32)
    if m.dtype == "BF16":  # bf16 is the top half of an f32: widen the bits, no numbers lost
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(m.rows, m.cols)
    from gguf.quants import dequantize

    out = dequantize(raw.reshape(m.rows, m.row_bytes), _gguf_qtype(m.dtype))
    return np.asarray(out, dtype=np.float32).reshape(m.rows, m.cols)


def rhs(cols: int, blob: int) -> np.ndarray:
    """The fixed right-hand vector of blob number ``blob`` (small values: a product stays finite)."""
    return np.random.default_rng(1000 + blob).uniform(-0.01, 0.01, cols).astype(np.float32)


class HostExperts:
    """Computes routed experts of ``blobs`` on the host, from a read-only mapping of each file."""

    def __init__(self, path: str | os.PathLike, blobs: Sequence[ExpertBlob], tensors: Mapping[str, TensorInfo]):
        self.blobs = list(blobs)
        self.matrices = [host_matrix(b, tensors, b.file or str(path)) for b in self.blobs]
        self._x = [rhs(m.cols, i) for i, m in enumerate(self.matrices)]
        self._maps: dict[str, mmap.mmap] = {}
        self._arrays: dict[str, np.ndarray] = {}
        try:
            for b in self.blobs:
                self._map(b.file or str(path))
        except BaseException:
            self.close()
            raise
        self._path = str(path)
        self._warm_up()
        self.bytes_touched = 0  # expert bytes the products read from the mappings
        self.last: dict[tuple[int, int], np.ndarray] = {}  # (blob, expert) → its product, the last layer's

    def _warm_up(self) -> None:
        """One product per stored type over zero bytes (never the file's: a cold session stays cold), so the
        first timed product does not carry numpy's, BLAS's and gguf-py's first-call costs (measured: 4.5 ms
        against 0.07 for a bf16 expert's three products), which would teach ``auto`` a host 8× too dear."""
        seen = set()
        with np.errstate(all="ignore"):
            for i, m in enumerate(self.matrices):
                if m.dtype not in seen:
                    seen.add(m.dtype)
                    widen(np.zeros(m.rows * m.row_bytes, dtype=np.uint8), m) @ self._x[i]

    def _map(self, file: str) -> np.ndarray:
        got = self._arrays.get(file)
        if got is None:
            fd = open_regular(file)
            try:
                m = self._maps[file] = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            got = self._arrays[file] = np.frombuffer(m, dtype=np.uint8)
        return got

    def expert_bytes(self, blob: int, expert: int) -> np.ndarray:
        """The expert's bytes as the file holds them (a view of the mapping: no copy)."""
        b = self.blobs[blob]
        offset, nbytes = b.slices[expert]
        return self._map(b.file or self._path)[offset:offset + nbytes]

    def run(self, keys: Sequence[tuple[int, int]]) -> int:
        """Each (blob, expert)'s product from the mapping; the expert bytes read."""
        self.last = {}
        touched = 0
        with np.errstate(all="ignore"):  # synthetic weights may hold NaN or inf: the product's time is the same
            for blob, expert in keys:
                raw = self.expert_bytes(blob, expert)
                self.last[(blob, expert)] = widen(raw, self.matrices[blob]) @ self._x[blob]
                touched += len(raw)
        self.bytes_touched += touched
        return touched

    def describe(self) -> str:
        kinds = sorted({m.dtype for m in self.matrices})
        how = ", ".join(f"{d} {_HOW.get(d, 'dequantized by gguf-py')}" for d in kinds)
        return f"numpy {np.__version__} over the file's mapping ({how})"

    def close(self) -> None:
        self._arrays.clear()
        maps, self._maps = self._maps, {}
        for m in maps.values():
            try:
                m.close()
            except BufferError:  # a product's view still alive: the mapping goes with it
                pass


def _gguf_qtype(name: str):  # -> GGMLQuantizationType | None
    try:
        from gguf.constants import GGMLQuantizationType
        from gguf.quants import _type_traits  # the types gguf-py can dequantize
    except ImportError:
        return None
    qtype = getattr(GGMLQuantizationType, name, None)
    return qtype if qtype is not None and qtype in _type_traits else None


def _quant_sizes(qtype) -> tuple[int, int]:  # noqa: ANN001
    from gguf.constants import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[qtype]
