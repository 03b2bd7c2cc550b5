"""Every GGUF index against what gguf-py's own reader says of the same file.

The index is built by the header walk (formats/gguf_walk.py), not by gguf-py's ``GGUFReader`` (which
cost 3/4 of a load's ``index`` phase). :func:`oracle_index` is the index as formats/gguf.py built it
from a plain ``GGUFReader`` before; each file here must give exactly that — tensors (name, offset,
bytes, dtype, shape), blobs, data offset, alignment and every key/value's text. The files: written by
gguf-py's ``GGUFWriter`` (every ggml type gguf-py knows, every value type, both byte orders, odd
alignments, hundreds of tensors, zero-size and one-element tensors, a gguf-split set), by the
project's synthetic writer, and the parser fuzzer's mutations that the walk accepts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from foreign_writers import split_names, write_gguf_split
from formats_helpers import gguf_kv_u32, gguf_tensor_info, write_gguf

from workbench.errors import FormatError
from workbench.formats import open_file_index
from workbench.formats.index import TensorIndex, TensorInfo
from workbench.formats.moe import group_gguf_experts

pytestmark = pytest.mark.timeout(120)


def oracle_index(path: str | os.PathLike[str]) -> TensorIndex:
    """The index from gguf-py's plain GGUFReader (arrays and all), the way formats/gguf.py built it."""
    from gguf import GGUFReader, GGUFValueType

    path = os.path.abspath(os.fspath(path))
    reader = GGUFReader(path)
    tensors = sorted((TensorInfo(t.name, int(t.data_offset), int(t.n_bytes), t.tensor_type.name,
                                 tuple(int(d) for d in reversed(t.shape.tolist())), path) for t in reader.tensors),
                     key=lambda t: (t.offset, t.nbytes))
    metadata = []
    for field in list(reader.fields.values())[3:]:  # after GGUF.version, GGUF.tensor_count, GGUF.kv_count
        if field.types[0] == GGUFValueType.ARRAY:
            itype, count = int(field.parts[3][0]), int(field.parts[4][0])
            metadata.append((field.name, f"array[{GGUFValueType(itype).name}] x {count}"))
        else:
            metadata.append((field.name, str(field.contents())[:200]))
    return TensorIndex(path=path, format="gguf", size=os.path.getsize(path), data_offset=int(reader.data_offset),
                       alignment=int(reader.alignment), tensors=tuple(tensors),
                       blobs=group_gguf_experts(path, tensors), metadata=tuple(metadata))


def assert_same_as_gguf_py(path) -> TensorIndex:
    index, oracle = open_file_index(path), oracle_index(path)
    assert index == oracle  # path, size, data offset, alignment, tensors, blobs, files
    assert index.metadata == oracle.metadata
    return index


def write_with_gguf_py(path: Path, *, big: bool = False, alignment: int | None = 64, n_small: int = 0) -> Path:
    """One tensor of every ggml type gguf-py knows (two rows of three blocks, raw bytes), numpy-typed
    tensors, stacked experts, a zero-size and a one-element tensor, ``n_small`` more tiny ones, and a
    key/value of every value type."""
    from gguf import GGML_QUANT_SIZES, GGUFEndian, GGUFWriter

    order = GGUFEndian.BIG if big else GGUFEndian.LITTLE
    writer = GGUFWriter(path, "llama", endianess=order)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    _add_every_value_type(writer)
    rng = np.random.default_rng(7)

    def add(name, array, **kw):
        writer.add_tensor(name, array.byteswap() if big and array.dtype.itemsize > 1 else array,
                          tensor_endianess=order, **kw)

    for ggml_type, (_, type_size) in GGML_QUANT_SIZES.items():
        add(f"q.{ggml_type.name}", rng.integers(0, 255, (2, 3 * type_size), dtype=np.uint8), raw_dtype=ggml_type)
    for dtype in (np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64):
        add(f"n.{np.dtype(dtype).name}", rng.integers(-9, 9, (3, 5)).astype(dtype))
    add("blk.0.ffn_up_exps.weight", rng.standard_normal((4, 3, 32)).astype(np.float32))
    add("blk.0.ffn_down_exps.weight", rng.integers(0, 255, (4, 2, 34), dtype=np.uint8),
        raw_dtype=next(t for t in GGML_QUANT_SIZES if t.name == "Q8_0"))
    add("empty", np.zeros((0, 32), np.float32))
    add("one", np.ones((1,), np.float32))
    add("cube", rng.standard_normal((2, 3, 5, 7)).astype(np.float16))
    for i in range(n_small):
        add(f"blk.{i}.small", rng.standard_normal((1 + i % 5,)).astype((np.float32, np.float16, np.int8)[i % 3]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_every_value_type(writer) -> None:  # noqa: ANN001 - a gguf.GGUFWriter
    writer.add_uint8("t.u8", 255)
    writer.add_int8("t.i8", -128)
    writer.add_uint16("t.u16", 65535)
    writer.add_int16("t.i16", -32768)
    writer.add_uint32("t.u32", 2**32 - 1)
    writer.add_int32("t.i32", -1)
    writer.add_float32("t.f32", 0.1)
    writer.add_float32("t.f32nan", float("nan"))
    writer.add_float32("t.f32inf", float("-inf"))
    writer.add_uint64("t.u64", 2**64 - 1)
    writer.add_int64("t.i64", -2**63)
    writer.add_float64("t.f64", 1e300)
    writer.add_bool("t.true", True)
    writer.add_bool("t.false", False)
    writer.add_string("t.str", "héllo ✓ \n\t")
    writer.add_string("t.long", "x" * 150 + "é" * 100)  # cut at 200 characters, not bytes
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, 1.5])
    writer.add_array("t.tokens", ["a", b"\xff\xfe", "✓"])  # a byte token that is not UTF-8, as in real vocabularies
    writer.add_array("t.nested", [[1, 2], [3]])
    writer.add_array("t.bools", [True, False])


@pytest.mark.parametrize("big", [False, True], ids=["little", "big-endian"])
@pytest.mark.parametrize("alignment", [64, 1, 8, 4096, None], ids=lambda a: f"align{a}")
def test_files_gguf_py_wrote(tmp_path, big, alignment):
    index = assert_same_as_gguf_py(write_with_gguf_py(tmp_path / "m.gguf", big=big, alignment=alignment))
    meta = dict(index.metadata)
    assert (meta["t.f32"], meta["t.true"], meta["t.tokens"]) == ("0.10000000149011612", "True", "array[STRING] x 3")
    assert index.tensor("empty").nbytes == 0 and index.tensor("one").shape == (1,)
    assert {b.name for b in index.blobs} == {"up", "down"}


def test_many_tensors(tmp_path):
    index = assert_same_as_gguf_py(write_with_gguf_py(tmp_path / "many.gguf", n_small=700, alignment=32))
    assert len(index) > 700


def test_a_gguf_split_set(tmp_path):
    write_gguf_split(tmp_path / "s.gguf", n=13, split_max_tensors=4, small_first_shard=True)
    names = split_names(tmp_path / "s.gguf")
    assert len(names) == 5
    for name in names:
        assert_same_as_gguf_py(name)


@pytest.mark.parametrize("layout, alignment", [("dense", 32), ("moe", 32), ("moe", 64), ("moe", 4096)])
def test_files_the_synthetic_writer_wrote(tmp_path, layout, alignment):
    from workbench.formats.synth import write_synthetic

    path = tmp_path / f"{layout}.gguf"
    write_synthetic(path, format="gguf", layout=layout, size=3 << 20, experts=8, alignment=alignment, seed=3)
    assert_same_as_gguf_py(path)


def test_a_zero_size_tensor_whose_other_dimensions_no_int64_holds_is_refused(tmp_path):
    # Zero bytes, so no range check sees it; gguf-py's reader refused the shape (numpy: "array is
    # too big") and the index said so, and ggml's int64 sizes cannot hold it either. Without the
    # reader, the walk must refuse it itself.
    path = write_gguf(tmp_path / "m.gguf", infos=[gguf_tensor_info("a", [32, 0, 2**62, 2**62], 0, 0)], data=bytes(32))
    with pytest.raises(FormatError, match=r"tensor 'a'\.dims: .*int64"):
        open_file_index(path)
    fits = write_gguf(tmp_path / "ok.gguf", kvs=[gguf_kv_u32("general.alignment", 32)],
                      infos=[gguf_tensor_info("a", [32, 0, 2**40], 0, 0)], data=bytes(32))
    assert assert_same_as_gguf_py(fits).tensor("a").shape == (2**40, 0, 32)


def test_what_the_fuzzer_makes_and_the_walk_accepts(tmp_path_factory):
    """Mutated headers of the fuzzer's bases (synthetic and gguf-py-written): each one the index
    accepts, gguf-py's reader must accept and read the same way."""
    hypothesis = pytest.importorskip("hypothesis")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz"))
    import fuzz_harness as fh

    root = tmp_path_factory.mktemp("oracle-fuzz")
    bases = [b for b in fh.make_synth_bases(root / "bases") if b.format == "gguf"]
    bases.append(fh.base_from_file(write_with_gguf_py(root / "gguf-py.gguf", alignment=64), "gguf-py"))
    accepted = []

    @hypothesis.settings(max_examples=150, derandomize=True, database=None, deadline=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(hypothesis.strategies.data())
    def one(data) -> None:
        case = data.draw(fh.cases(bases))
        if case.head[:4] != b"GGUF":
            return
        path = root / "case.gguf"
        fh.write_case(case, path)
        try:
            open_file_index(path)
        except FormatError:
            return
        accepted.append(case.note)
        assert_same_as_gguf_py(path)

    one()
    assert len(accepted) >= 10, accepted  # the check above ran on files that vary (15 of the 150 today)
