"""GGUF → :class:`TensorIndex`: the header walked once (:mod:`workbench.formats.gguf_walk`) with gguf-py's tables.

The walk reads every field the index holds and checks every count, length, dtype and tensor range
against the file size; gguf-py supplies what the format means (value types, ggml types with their
block and type sizes). Its ``GGUFReader`` is not run: it built a numpy view per header field and per
tensor — 3/4 of a load's ``index`` phase on a 157-tensor MoE file (docs/benchmarks/gguf-index-host.md)
— and the index used none of them. tests/test_formats_gguf_oracle.py holds every index against what
gguf-py's plain reader says of the same file.

Shapes: GGUF lists dimensions in ggml order, ``ne0`` (the contiguous row length) first. The index
stores numpy/PyTorch order, slowest dimension first, so a stacked expert tensor
``blk.N.ffn_gate_exps.weight`` reads ``(n_experts, n_ff, n_embd)``. Offsets are absolute (from byte 0
of the file).
"""
from __future__ import annotations

from typing import ClassVar

from workbench.formats.bounds import MAX_TENSORS
from workbench.formats.gguf_walk import MAGIC, walk_gguf_header
from workbench.formats.index import TensorIndex
from workbench.formats.moe import group_gguf_experts


class GGUFFormat:
    """Registry entry for GGUF: content sniffing and indexing."""

    name: ClassVar[str] = "gguf"

    @staticmethod
    def sniff(head: bytes) -> bool:
        return head[:4] == MAGIC

    @staticmethod
    def read_index(path: str, size: int, max_tensors: int = MAX_TENSORS) -> TensorIndex:
        return read_gguf_index(path, size, max_tensors)


def read_gguf_index(path: str, size: int, max_tensors: int = MAX_TENSORS) -> TensorIndex:
    """Index a GGUF file of ``size`` bytes holding at most ``max_tensors`` tensors (what its model has
    left of :data:`~workbench.formats.bounds.MAX_TENSORS`); FormatError on anything malformed."""
    header = walk_gguf_header(path, size, max_tensors)
    tensors = sorted(header.tensors, key=lambda t: (t.offset, t.nbytes))  # file order: the data's, not the table's
    return TensorIndex(
        path=path, format="gguf", size=size, data_offset=header.data_offset, alignment=header.alignment,
        tensors=tuple(tensors), blobs=group_gguf_experts(path, tensors), metadata=header.metadata,
    )
