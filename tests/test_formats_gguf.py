"""GGUF specifics: files written by gguf-py itself, big vocabularies, byte order, no gguf-py reader in the index."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from formats_helpers import ARRAY, STRING, gguf_bytes, gguf_string, write_gguf

from workbench.errors import FormatError
from workbench.formats import open_index


def write_with_gguf_py(path, *, endianess=None, vocab: int = 0):
    from gguf import GGMLQuantizationType, GGUFEndian, GGUFWriter

    big = endianess == "big"
    writer = GGUFWriter(path, "llama", endianess=GGUFEndian.BIG if big else GGUFEndian.LITTLE)
    writer.add_custom_alignment(64)
    writer.add_block_count(1)
    if vocab:
        writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(vocab)])
        writer.add_array("tokenizer.ggml.scores", [float(i) for i in range(vocab)])
    norm = np.linspace(-1, 1, 96, dtype=np.float32).reshape(3, 32)
    quant = np.arange(2 * 3 * 34, dtype=np.uint8).reshape(2, 3, 34)  # 2 x 3 x Q8_0 blocks of 32
    order = GGUFEndian.BIG if big else GGUFEndian.LITTLE
    writer.add_tensor("norm", norm.byteswap() if big else norm, tensor_endianess=order)
    writer.add_tensor("blk.0.ffn_up_exps.weight", quant, raw_dtype=GGMLQuantizationType.Q8_0,
                      tensor_endianess=order)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("endianess", ["little", "big"])
def test_file_written_by_gguf_py(tmp_path, endianess):
    from gguf import GGUFReader

    path = write_with_gguf_py(tmp_path / "w.gguf", endianess=endianess)
    index = open_index(path)
    reader = GGUFReader(path)
    assert index.alignment == 64 and index.data_offset == reader.data_offset
    assert index.tensor("norm").shape == (3, 32) and index.tensor("norm").dtype == "F32"
    up = index.tensor("blk.0.ffn_up_exps.weight")
    assert (up.shape, up.dtype, up.nbytes) == ((2, 3, 32), "Q8_0", 2 * 3 * 34)  # numpy order, elements
    assert [t.offset for t in index] == sorted(t.data_offset for t in reader.tensors)
    (blob,) = index.blobs
    assert (blob.n_experts, blob.stride, blob.name) == (2, 102, "up")
    assert dict(index.metadata)["llama.block_count"] == "1"


def test_vocabulary_arrays_are_skipped_but_summarised(tmp_path):
    from gguf import GGUFReader

    path = write_with_gguf_py(tmp_path / "v.gguf", vocab=3000)
    index = open_index(path)
    meta = dict(index.metadata)
    assert meta["tokenizer.ggml.tokens"] == "array[STRING] x 3000"
    assert meta["tokenizer.ggml.scores"] == "array[FLOAT32] x 3000"
    plain = GGUFReader(path)  # the slow path parses every token: it must agree
    assert index.data_offset == plain.data_offset
    assert [(t.name, t.offset, t.nbytes) for t in index] == \
        [(t.name, int(t.data_offset), int(t.n_bytes)) for t in sorted(plain.tensors, key=lambda t: t.data_offset)]


def test_the_index_runs_no_gguf_reader(tmp_path, monkeypatch):
    # GGUFReader built a numpy view per header field and per tensor: ~15 of the ~20 ms a load's index
    # phase took on a 157-tensor MoE file (docs/benchmarks/gguf-index-host.md), for nothing the index
    # kept. The walk reads the header; gguf-py's reader is the tests' oracle (test_formats_gguf_oracle).
    import gguf

    def refuse(self, *a, **k):
        raise AssertionError("GGUFReader constructed while indexing")

    monkeypatch.setattr(gguf.GGUFReader, "__init__", refuse)
    index = open_index(write_with_gguf_py(tmp_path / "w.gguf", vocab=50))
    assert index.tensor("norm").shape == (3, 32)
    with pytest.raises(FormatError, match="past the end"):  # a bad file is the walk's to refuse, alone
        open_index(write_gguf(tmp_path / "cut.gguf", data=bytes(40)))


@pytest.mark.parametrize("length, at", [(2**40, 1), (2**64 - 1, 1), (9, 2)], ids=["huge", "u64max", "last-one-short"])
def test_a_token_that_runs_past_the_end_is_named(tmp_path, length, at):
    # Vocabularies are stepped over in one tight loop (150k tokens: ~30 of the ~340 ms an index took);
    # a token that overruns still gets the checked walk's error, naming the token.
    tokens = [gguf_string("a"), struct.pack("<Q", 3) + b"bcd", gguf_string("e")]
    tokens[at] = struct.pack("<Q", length) + b"x" * 8
    kv = gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 3) + b"".join(tokens)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes([kv], [], b"", alignment=1))  # the file ends where the tokens do
    with pytest.raises(FormatError, match="truncated") as info:
        open_index(path)
    assert info.value.field == f"tokenizer.ggml.tokens[{at}]"
