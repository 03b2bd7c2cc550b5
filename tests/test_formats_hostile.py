"""Hostile model files found by the parser fuzzer (benchmarks/fuzz/fuzz_formats.py), one test per bug.

Each of these raised something other than FormatError, printed a multi-line or unprintable error,
took seconds to minutes, or allocated hundreds of MiB for a size the file only claimed.
"""
from __future__ import annotations

import struct
import time
import tracemalloc

import pytest
from formats_helpers import STRING, gguf_kv_u32, gguf_string, gguf_tensor_info, write_gguf, write_safetensors

from workbench.errors import FormatError
from workbench.formats import open_index

pytestmark = pytest.mark.timeout(60)

F32 = 0


@pytest.fixture(autouse=True, scope="module")
def _warm(tmp_path_factory):
    """Index one valid file of each format first: gguf-py's import must not count as a case's allocation."""
    root = tmp_path_factory.mktemp("warm")
    open_index(write_gguf(root / "ok.gguf"))
    open_index(write_safetensors(root / "ok.safetensors", {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
                                 bytes(1)))


def index_within(path, seconds: float = 1.0, max_alloc: int = 4 << 20):
    """open_index's result (or FormatError), failing if it took longer or allocated more than given."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        return open_index(path)
    finally:
        elapsed, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert elapsed < seconds, f"took {elapsed:.2f} s"
        assert peak < max_alloc, f"allocated {peak / 2**20:.1f} MiB"


def raw_tensor_info(name: bytes, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
            + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset))


def st_raw(path, raw: bytes, data: bytes = bytes(64)):
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


# -- GGUF ------------------------------------------------------------------------------------------

def test_gguf_stacked_experts_of_zero_bytes(tmp_path):
    # 2^24 experts of 0 bytes each: the grouping built 2^24 slices (8 s, 1 GiB) before the fix.
    infos = [gguf_tensor_info("blk.0.ffn_gate_exps.weight", [32, 0, 2**24], F32, 0)]
    with pytest.raises(FormatError, match="ffn_gate_exps.*expert"):
        index_within(write_gguf(tmp_path / "m.gguf", infos=infos, data=b""))


def test_gguf_implausible_expert_count(tmp_path):
    infos = [gguf_tensor_info("blk.0.ffn_up_exps.weight", [1, 1, 50_000], F32, 0)]
    with pytest.raises(FormatError, match="ffn_up_exps.*50000 experts"):
        index_within(write_gguf(tmp_path / "m.gguf", infos=infos, data=bytes(200_000)))


def test_gguf_layer_number_too_long_for_int(tmp_path):
    name = "blk." + "9" * 5000 + ".ffn_gate_exps.weight"  # int() refuses > 4300 digits: a ValueError
    index = index_within(write_gguf(tmp_path / "m.gguf", infos=[gguf_tensor_info(name, [8, 2], F32, 0)],
                                    data=bytes(64)))
    assert len(index) == 1 and not index.blobs


def test_gguf_tensor_name_not_utf8(tmp_path):
    infos = [raw_tensor_info(b"\xff", [8], F32, 0), raw_tensor_info(b"\xfe", [8], F32, 32)]
    with pytest.raises(FormatError, match=r"tensor\[0\]\.name: not valid UTF-8"):  # was "duplicate name"
        index_within(write_gguf(tmp_path / "m.gguf", infos=infos, data=bytes(64)))


def test_gguf_key_not_utf8(tmp_path):
    kv = struct.pack("<Q", 2) + b"\xc3(" + struct.pack("<II", 4, 1)
    with pytest.raises(FormatError, match=r"kv\[0\]\.key: not valid UTF-8"):  # was field 'gguf'
        index_within(write_gguf(tmp_path / "m.gguf", kvs=[kv], data=bytes(96)))


def test_gguf_string_value_not_utf8(tmp_path):
    kv = gguf_string("general.name") + struct.pack("<IQ", STRING, 2) + b"\xed\xa0"
    with pytest.raises(FormatError, match=r"general\.name: not valid UTF-8"):
        index_within(write_gguf(tmp_path / "m.gguf", kvs=[kv], data=bytes(96)))


def test_gguf_control_characters_stay_on_one_line(tmp_path):
    infos = [gguf_tensor_info("a\r\nb", [8], F32, 0, n_dims=9)]
    with pytest.raises(FormatError) as info:
        index_within(write_gguf(tmp_path / "m.gguf", infos=infos, data=bytes(64)))
    text = str(info.value)
    assert "\n" not in text and "\r" not in text and r"a\r\nb" in text and text.isprintable()


@pytest.mark.parametrize("dims", [[2**30, 2**30], [32, 2**62]])
def test_gguf_claimed_huge_tensor_allocates_nothing(tmp_path, dims):
    path = write_gguf(tmp_path / "m.gguf", infos=[gguf_tensor_info("a", dims, F32, 0)], data=bytes(64),
                      kvs=[gguf_kv_u32("general.alignment", 32)])
    with pytest.raises(FormatError, match="past the end"):
        index_within(path, max_alloc=256 << 10)


# -- safetensors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [["F32"], {"F32": 1}])
def test_safetensors_unhashable_dtype(tmp_path, dtype):
    header = {"a": {"dtype": dtype, "shape": [1], "data_offsets": [0, 4]}}
    with pytest.raises(FormatError, match=r"tensor 'a'\.dtype"):  # was TypeError: unhashable type
        index_within(write_safetensors(tmp_path / "m.safetensors", header, bytes(4)))


def test_safetensors_integer_too_long_for_python(tmp_path):
    raw = b'{"a":{"dtype":"U8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,1]}}'
    with pytest.raises(FormatError, match="header: "):  # was ValueError: Exceeds the limit (4300 digits)
        index_within(st_raw(tmp_path / "m.safetensors", raw))


def test_safetensors_lone_surrogate_name(tmp_path):
    raw = b'{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'  # was indexed: a name no one can print
    with pytest.raises(FormatError, match="not valid Unicode"):
        index_within(st_raw(tmp_path / "m.safetensors", raw))


def test_safetensors_lone_surrogate_metadata(tmp_path):
    raw = b'{"__metadata__":{"k":"\\udc00"},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    with pytest.raises(FormatError, match="not valid Unicode"):
        index_within(st_raw(tmp_path / "m.safetensors", raw))


def test_safetensors_newline_in_name_stays_on_one_line(tmp_path):
    header = {"a\nb": {"dtype": "U9", "shape": [1], "data_offsets": [0, 1]}}
    with pytest.raises(FormatError) as info:
        index_within(write_safetensors(tmp_path / "m.safetensors", header, bytes(1)))
    assert "\n" not in str(info.value) and r"a\nb" in str(info.value)


@pytest.mark.parametrize("name", [
    "layers.0.experts.0." * 600 + "x",  # 12 s in the backtracking expert regex before the fix
    "layers.0." + "experts.0." * 3000 + "x",
    "model.layers.1.block_sparse_moe.experts.0.w2" * 500,
])
def test_safetensors_long_expert_like_names_index_quickly(tmp_path, name):
    header = {name: {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    index = index_within(write_safetensors(tmp_path / "m.safetensors", header, bytes(1)))
    assert len(index) == 1


def test_safetensors_expert_number_too_long_for_int(tmp_path):
    header = {"model.layers.0.mlp.experts." + "1" * 5000 + ".up_proj.weight":
              {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    index = index_within(write_safetensors(tmp_path / "m.safetensors", header, bytes(1)))
    assert len(index) == 1 and not index.blobs


def test_safetensors_claimed_huge_tensor_allocates_nothing(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [2**30, 2**30], "data_offsets": [0, 2**62]}}
    with pytest.raises(FormatError, match="past the end"):
        index_within(write_safetensors(tmp_path / "m.safetensors", header, bytes(64)), max_alloc=256 << 10)


def test_expert_names_still_group(tmp_path):
    # The expert-name matcher was rewritten without regex backtracking: real names still group.
    names = [f"model.layers.{layer}.mlp.experts.{e}.{p}_proj.weight" for layer in range(2) for e in range(3)
             for p in ("gate", "up", "down")]
    names += [f"model.layers.5.block_sparse_moe.experts.{e}.{w}.weight" for e in range(2) for w in ("w1", "w2", "w3")]
    names += ["model.layers.7.mlp.experts.0.down_proj.weight_scale_inv", "model.layers.7.mlp.experts.1.down_proj.weight_scale_inv"]
    header, pos = {}, 0
    for name in names:
        header[name] = {"dtype": "U8", "shape": [4], "data_offsets": [pos, pos + 4]}
        pos += 4
    index = open_index(write_safetensors(tmp_path / "m.safetensors", header, bytes(pos)))
    got = sorted((b.layer, b.name, b.n_experts) for b in index.blobs)
    assert got == [(0, "down", 3), (0, "gate", 3), (0, "up", 3), (1, "down", 3), (1, "gate", 3), (1, "up", 3),
                   (5, "down", 2), (5, "gate", 2), (5, "up", 2), (7, "down.weight_scale_inv", 2)]


def test_gguf_dimension_past_int64_is_named(tmp_path):
    # A zero-element tensor with a 2^64-1 dimension passed the walk; numpy's reshape inside gguf-py then
    # failed and the error named no field ("gguf: gguf-py cannot read it: ValueError ...").
    infos = [gguf_tensor_info("a", [32, 0, 2**64 - 1], F32, 0)]
    with pytest.raises(FormatError, match=r"tensor 'a'\.dims: .*int64"):
        index_within(write_gguf(tmp_path / "m.gguf", infos=infos, data=bytes(32)))


@pytest.mark.parametrize("key", [b"", b"   ", b"\x00"])
def test_gguf_blank_key_is_named_by_its_place(tmp_path, key):
    # An empty key gave the error field '' ("file: : not valid UTF-8"): no field named at all.
    kvs = [gguf_kv_u32("general.alignment", 32), struct.pack("<Q", len(key)) + key + struct.pack("<IQ", STRING, 1) + b"\xff"]
    with pytest.raises(FormatError) as info:
        index_within(write_gguf(tmp_path / "m.gguf", kvs=kvs, data=bytes(96)))
    assert info.value.field == "kv[1]" and "not valid UTF-8" in str(info.value)
