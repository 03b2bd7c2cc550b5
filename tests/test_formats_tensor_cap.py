"""Issue 35 §1: one cap for the tensors of a model, whatever its files — a single safetensors header or
GGUF, not only a set's index — checked before the index is built, refused in one line within 1 s of CPU.
(Before: a 94 MB header of 1.4 M tensors took 32 s and 1.4 GB to inspect, a GGUF of 3 M tensors 31 s
and 2.3 GB.)"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from formats_helpers import ARRAY, STRING, gguf_bytes, gguf_kv_u32, gguf_string, gguf_tensor_info
from one_line import one_error_line, refused_within_a_second

from workbench.cli import main
from workbench.errors import FormatError
from workbench.formats import open_index
from workbench.formats.bounds import MAX_KV, MAX_KV_ITEMS, MAX_TENSORS

_ZERO = '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}'


def safetensors_of(path: Path, n: int, value: str = _ZERO) -> Path:
    header = ("{" + ",".join(f'"t{i:07d}":{value}' for i in range(n)) + "}").encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def gguf_of(path: Path, n: int, kvs: dict[str, int] | None = None, records: bool = True) -> Path:
    """A GGUF of ``n`` empty F32 tensors (``records=False``: the count says ``n``, the records are garbage)."""
    kv = [gguf_kv_u32(k, v) for k, v in (kvs or {}).items()]
    infos = [gguf_tensor_info(f"t{i:07d}", [0], 0, 0) for i in range(n)] if records else [b"\xff" * (32 * n)]
    path.write_bytes(gguf_bytes(kv, infos, b"\0" * 64, n_tensors=n))
    return path


def refused(path: Path, *needles: str) -> None:
    refused_within_a_second(lambda: open_index(path), FormatError, *needles)
    one_error_line(CliRunner().invoke(main, ["inspect", "--no-hash", str(path)]), needles[0])


def test_a_safetensors_header_of_more_tensors_than_a_model_may_hold_is_refused_before_parsing(tmp_path):
    refused(safetensors_of(tmp_path / "m.safetensors", MAX_TENSORS + 1), f"{MAX_TENSORS + 1:,} tensors",
            f"{MAX_TENSORS:,} a model may hold")


def test_a_header_that_escapes_its_keys_is_still_bounded_by_its_strings(tmp_path):
    # "data\u005foffsets" is "data_offsets" to JSON: past the cap by more than the metadata's slack
    escaped = '{"dtype":"U8","shape":[0],"data\\u005foffsets":[0,0]}'
    refused(safetensors_of(tmp_path / "m.safetensors", MAX_TENSORS + 1_000, value=escaped), "about",
            f"{MAX_TENSORS:,} a model may hold")


def test_a_header_of_more_values_than_its_tensors_could_hold_is_refused_before_parsing(tmp_path):
    path = tmp_path / "m.safetensors"
    header = b'{"t":{"dtype":"U8","shape":[' + b",".join([b"0"] * (20 * MAX_TENSORS)) + b'],"data_offsets":[0,0]}}'
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    refused(path, "JSON values: more than a header of")


def test_entries_that_are_not_tensors_count_against_the_cap_before_any_is_read(tmp_path):
    # two quotes an entry pass the string count; the parsed entries are counted before a tensor is made
    refused(safetensors_of(tmp_path / "m.safetensors", MAX_TENSORS + 1, value="0"), f"{MAX_TENSORS + 1:,} tensors")


def test_a_gguf_counting_more_tensors_than_a_model_may_hold_is_refused_at_its_count(tmp_path):
    refused(gguf_of(tmp_path / "m.gguf", MAX_TENSORS + 1, records=False), "tensor_count", f"{MAX_TENSORS + 1:,}")


def test_a_gguf_counting_more_key_values_than_any_file_holds_is_refused_at_its_count(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, MAX_KV + 1) + b"\0" * (13 * (MAX_KV + 1)))
    refused(path, "kv_count", f"{MAX_KV:,}")


def test_the_strings_a_ggufs_key_values_hold_are_bounded_in_all_before_they_are_stepped_over(tmp_path):
    # 1,000 empty strings, then 2^22 - 999 of them (sparse zeros): the second alone would pass, not both
    path = tmp_path / "m.gguf"
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 2))
        for key, count in (("tokenizer.ggml.tokens", 1_000), ("tokenizer.ggml.merges", MAX_KV_ITEMS - 999)):
            f.write(gguf_string(key) + struct.pack("<IIQ", ARRAY, STRING, count))
            f.seek(8 * count, 1)
        f.truncate(f.tell() + 64)
    refused(path, "tokenizer.ggml.merges.count", f"{MAX_KV_ITEMS:,} strings")


def test_a_split_set_shares_one_cap_and_its_later_splits_are_refused_at_their_counts(tmp_path):
    half = MAX_TENSORS // 2 + 1
    keys = {"split.count": 2, "split.tensors.count": 2 * half}
    gguf_of(tmp_path / "m-00001-of-00002.gguf", half, {**keys, "split.no": 0})
    gguf_of(tmp_path / "m-00002-of-00002.gguf", half, {**keys, "split.no": 1}, records=False)  # never walked
    with pytest.raises(FormatError) as err:
        open_index(tmp_path / "m-00001-of-00002.gguf")
    text = str(err.value)
    assert "m-00002-of-00002.gguf" in text and f"{half:,} tensors" in text and "in the model's other files" in text


def test_a_model_at_the_cap_is_still_indexed(tmp_path):
    index = open_index(gguf_of(tmp_path / "m.gguf", 1000))
    assert len(index) == 1000
