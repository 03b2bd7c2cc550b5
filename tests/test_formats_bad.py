"""Bad model files → FormatError naming the file and the field, quickly, and nothing else."""
from __future__ import annotations

import struct

import pytest
from formats_helpers import (
    ARRAY, UINT8, gguf_kv_u32, gguf_string, gguf_tensor_info, st_entry, write_gguf, write_safetensors,
)

from workbench.errors import FormatError
from workbench.formats import open_index

pytestmark = pytest.mark.timeout(20)  # a hang on a 2^60 count must fail, not stall the suite


def expect_error(path, field_part: str) -> FormatError:
    with pytest.raises(FormatError) as info:
        open_index(path)
    err = info.value
    assert err.path == str(path)
    assert field_part in err.field, f"field {err.field!r} does not mention {field_part!r}: {err}"
    assert str(path) in str(err) and "\n" not in str(err)
    return err


def test_valid_hand_built_gguf_is_accepted(tmp_path):
    index = open_index(write_gguf(tmp_path / "ok.gguf"))
    assert [t.name for t in index] == ["a", "b"]
    assert [t.nbytes for t in index] == [32, 64]
    assert index.tensor("b").offset == index.data_offset + 32


def test_missing_path(tmp_path):
    expect_error(tmp_path / "nope.gguf", "path")


def test_directory(tmp_path):
    expect_error(tmp_path, "path")


def test_empty_file(tmp_path):
    (tmp_path / "e.gguf").write_bytes(b"")
    expect_error(tmp_path / "e.gguf", "size")


def test_wrong_magic(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", magic=b"GGML")
    err = expect_error(path, "magic")
    assert "GGUF" in str(err) or "gguf" in str(err)


def test_truncated_gguf_header(tmp_path):
    path = write_gguf(tmp_path / "t.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:110])  # inside the second tensor-info record
    err = expect_error(path, "tensor 'b'")
    assert "truncated" in str(err)


def test_truncated_tiny_file(tmp_path):
    (tmp_path / "tiny").write_bytes(b"GGUF\x03\x00")
    expect_error(tmp_path / "tiny", "header")


def test_gguf_tensor_range_past_eof(tmp_path):
    path = write_gguf(tmp_path / "r.gguf", data=bytes(64))  # b needs 32..96
    expect_error(path, "tensor 'b'")


def test_gguf_overlapping_tensors(tmp_path):
    infos = [gguf_tensor_info("a", [16], 0, 0), gguf_tensor_info("b", [16], 0, 32)]  # a is 0..64
    err = expect_error(write_gguf(tmp_path / "o.gguf", infos=infos), "tensor 'b'")
    assert "overlaps" in str(err)


def test_gguf_unknown_dtype(tmp_path):
    infos = [gguf_tensor_info("a", [8], 0, 0), gguf_tensor_info("b", [16], 77, 32)]
    err = expect_error(write_gguf(tmp_path / "d.gguf", infos=infos), "dtype")
    assert "77" in str(err)


def test_gguf_absurd_tensor_count(tmp_path):
    expect_error(write_gguf(tmp_path / "c.gguf", n_tensors=2**60), "tensor_count")


def test_gguf_absurd_kv_count(tmp_path):
    expect_error(write_gguf(tmp_path / "k.gguf", n_kv=2**60), "kv_count")


def test_gguf_absurd_array_length(tmp_path):
    # gguf-py would loop 2^60 times over this array; the header walk refuses it first.
    kv = gguf_string("tokenizer.ggml.scores") + struct.pack("<IIQ", ARRAY, UINT8, 2**60)
    expect_error(write_gguf(tmp_path / "a.gguf", kvs=[kv]), "tokenizer.ggml.scores")


def test_gguf_absurd_string_array_length(tmp_path):
    kv = gguf_string("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, 8, 2**60)
    expect_error(write_gguf(tmp_path / "s.gguf", kvs=[kv]), "tokenizer.ggml.tokens")


def test_gguf_absurd_dimension_count(tmp_path):
    infos = [gguf_tensor_info("a", [8], 0, 0, n_dims=1_000_000), gguf_tensor_info("b", [16], 0, 32)]
    expect_error(write_gguf(tmp_path / "n.gguf", infos=infos), "n_dims")


def test_gguf_absurd_dimension_size(tmp_path):
    infos = [gguf_tensor_info("a", [8, 2**40], 0, 0), gguf_tensor_info("b", [16], 0, 32)]
    expect_error(write_gguf(tmp_path / "z.gguf", infos=infos), "tensor 'a'")


@pytest.mark.parametrize("alignment", [0, 48, 1000])
def test_gguf_alignment_not_power_of_two(tmp_path, alignment):
    err = expect_error(write_gguf(tmp_path / "al.gguf", kvs=[gguf_kv_u32("general.alignment", alignment)]),
                       "general.alignment")
    assert "power of two" in str(err)


def test_gguf_misaligned_tensor_offset(tmp_path):
    infos = [gguf_tensor_info("a", [8], 0, 0), gguf_tensor_info("b", [16], 0, 40)]
    expect_error(write_gguf(tmp_path / "mo.gguf", infos=infos, data=bytes(128)), "tensor 'b'.offset")


def test_gguf_duplicate_tensor_name(tmp_path):
    infos = [gguf_tensor_info("a", [8], 0, 0), gguf_tensor_info("a", [16], 0, 32)]
    expect_error(write_gguf(tmp_path / "dup.gguf", infos=infos), "tensor 'a'")


def test_safetensors_header_length_beyond_eof(tmp_path):
    path = write_safetensors(tmp_path / "h.safetensors", {"a": st_entry("F32", [2], 0, 8)}, bytes(8),
                             length=10**12)
    expect_error(path, "header length")


def test_safetensors_truncated_header_json(tmp_path):
    path = tmp_path / "j.safetensors"
    path.write_bytes(struct.pack("<Q", 20) + b'{"a": {"dtype": "F3')
    expect_error(path, "header")


def test_safetensors_tensor_range_past_eof(tmp_path):
    path = write_safetensors(tmp_path / "r.safetensors", {"a": st_entry("F32", [4], 0, 16)}, bytes(8))
    err = expect_error(path, "tensor 'a'.data_offsets")
    assert "past the end" in str(err)


def test_safetensors_overlapping_tensors(tmp_path):
    header = {"a": st_entry("F32", [4], 0, 16), "b": st_entry("F32", [4], 8, 24)}
    err = expect_error(write_safetensors(tmp_path / "o.safetensors", header, bytes(24)), "data_offsets")
    assert "overlaps" in str(err)


def test_safetensors_unknown_dtype(tmp_path):
    path = write_safetensors(tmp_path / "d.safetensors", {"a": st_entry("F17", [4], 0, 16)}, bytes(16))
    expect_error(path, "tensor 'a'.dtype")


def test_safetensors_size_mismatch(tmp_path):
    path = write_safetensors(tmp_path / "s.safetensors", {"a": st_entry("F32", [5], 0, 16)}, bytes(16))
    expect_error(path, "tensor 'a'.data_offsets")


def test_safetensors_absurd_dimension_count(tmp_path):
    path = write_safetensors(tmp_path / "n.safetensors", {"a": st_entry("U8", [1] * 1000, 0, 1)}, bytes(1))
    expect_error(path, "tensor 'a'.shape")


def test_safetensors_absurd_dimension_size(tmp_path):
    path = write_safetensors(tmp_path / "z.safetensors", {"a": st_entry("U8", [2**62, 2**62], 0, 1)}, bytes(1))
    expect_error(path, "tensor 'a'")


def test_safetensors_bad_metadata(tmp_path):
    header = {"__metadata__": {"k": 3}, "a": st_entry("U8", [1], 0, 1)}
    expect_error(write_safetensors(tmp_path / "md.safetensors", header, bytes(1)), "__metadata__")


def test_unknown_format(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"PK\x03\x04" + bytes(60))
    expect_error(tmp_path / "x.bin", "magic")


def test_safetensors_duplicate_tensor_name(tmp_path):
    path = tmp_path / "dup.safetensors"
    raw = b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, ' \
          b'"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}'
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(2))
    err = expect_error(path, "header")
    assert "duplicate" in str(err)


# Found in review: each of these raised something other than FormatError (a traceback in `inspect`).

def test_gguf_empty_array_of_unknown_item_type(tmp_path):
    kv = gguf_string("a.b") + struct.pack("<IIQ", ARRAY, 99, 0)
    with pytest.raises(FormatError, match="item_type: unknown GGUF value type 99"):
        open_index(write_gguf(tmp_path / "m.gguf", kvs=[kv], infos=[], data=b""))


def test_gguf_arrays_nested_too_deep_say_so(tmp_path):
    inner = struct.pack("<IQ", UINT8, 0)
    for _ in range(5):
        inner = struct.pack("<IQ", ARRAY, 1) + inner
    kv = gguf_string("a.b") + struct.pack("<I", ARRAY) + inner
    with pytest.raises(FormatError, match="nested deeper"):
        open_index(write_gguf(tmp_path / "m.gguf", kvs=[kv], infos=[], data=b""))


@pytest.mark.parametrize("entry, field", [
    ({"dtype": "F16", "shape": [10**200, 10**200], "data_offsets": [0, 2]}, "data_offsets"),  # no float overflow
    ({"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}, "shape"),  # JSON true is not a size
    ({"dtype": "U8", "shape": [1], "data_offsets": [False, True]}, "data_offsets"),
])
def test_safetensors_values_that_are_not_sizes(tmp_path, entry, field):
    with pytest.raises(FormatError, match=field):
        open_index(write_safetensors(tmp_path / "m.safetensors", {"t": entry}, b"\0" * 16))


def test_safetensors_deeply_nested_header(tmp_path):
    raw = b'{"a":' + b"[" * 200000 + b"]" * 200000 + b"}"
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(FormatError, match="nested too deeply"):
        open_index(path)
