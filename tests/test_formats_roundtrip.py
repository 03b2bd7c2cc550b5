"""synth → open_index, cross-checked against gguf-py's reader and the safetensors package."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.formats import open_index
from workbench.formats.synth import parse_size, write_synthetic

CASES = [(fmt, layout, align) for fmt in ("gguf", "safetensors") for layout in ("dense", "moe")
         for align in (32, 64, 4096)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One ~1.5 MiB file per (format, layout, alignment), written once for the module."""
    root = tmp_path_factory.mktemp("synth")
    out = {}
    for fmt, layout, align in CASES:
        path = root / f"{layout}-{align}.{fmt}"
        out[fmt, layout, align] = (path, write_synthetic(path, format=fmt, layout=layout, size=1536 << 10,
                                                         experts=4, alignment=align, seed=7))
    return out


def file_bytes(path, offset: int, nbytes: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


@pytest.mark.parametrize("fmt,layout,align", [c for c in CASES if c[0] == "gguf"])
def test_gguf_matches_gguf_py(models, fmt, layout, align):
    from gguf import GGUFReader

    path, written = models[fmt, layout, align]
    index = open_index(path)
    assert index == written
    reader = GGUFReader(path)
    assert index.alignment == align == int(reader.alignment)
    assert index.data_offset == reader.data_offset and index.data_offset % align == 0
    assert len(index) == len(reader.tensors)
    for rt in reader.tensors:
        t = index.tensor(rt.name)
        assert t.offset == rt.data_offset and t.nbytes == rt.n_bytes
        assert t.dtype == rt.tensor_type.name
        assert t.shape == tuple(reversed([int(d) for d in rt.shape]))  # numpy order
        assert (t.offset - index.data_offset) % align == 0
        assert file_bytes(path, t.offset, t.nbytes) == rt.data.tobytes()
    assert [t.offset for t in index] == sorted(t.offset for t in index)


@pytest.mark.parametrize("fmt,layout,align", [c for c in CASES if c[0] == "safetensors"])
def test_safetensors_matches_package(models, fmt, layout, align):
    from safetensors import safe_open

    path, written = models[fmt, layout, align]
    index = open_index(path)
    assert index == written
    assert index.data_offset % max(8, align) == 0
    with safe_open(str(path), framework="numpy") as f:
        assert sorted(f.keys()) == sorted(t.name for t in index)
        for t in index:
            array = f.get_tensor(t.name)
            assert t.shape == array.shape and t.nbytes == array.nbytes
            assert t.dtype == {np.float16: "F16", np.float32: "F32"}[array.dtype.type]
            assert file_bytes(path, t.offset, t.nbytes) == array.tobytes()
            assert np.isfinite(array).all()


@pytest.mark.parametrize("fmt,layout", [("gguf", "dense"), ("gguf", "moe"), ("safetensors", "dense"),
                                        ("safetensors", "moe")])
def test_shaped_like_a_model(models, fmt, layout):
    index = models[fmt, layout, 32][1]
    names = [t.name for t in index]
    layer0 = [n for n in names if ".0." in n]
    if fmt == "gguf":
        assert names[0] == "token_embd.weight" and names[-1] == "output.weight"
        assert {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_norm.weight"} <= set(layer0)
        assert ("blk.0.ffn_gate_inp.weight" in layer0) == (layout == "moe")
        assert index.tensor("blk.0.attn_norm.weight").dtype == "F32"
        assert index.tensor("blk.0.attn_q.weight").dtype == "Q4_0"
    else:
        assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
        assert "model.layers.0.self_attn.o_proj.weight" in layer0
        assert ("model.layers.0.mlp.experts.3.down_proj.weight" in layer0) == (layout == "moe")
    assert index.is_moe == (layout == "moe")
    assert any("shexp" in n or "shared_expert" in n for n in names) == (layout == "moe")


def test_alignment_decides_page_alignment(models):
    for fmt, layout in (("gguf", "dense"), ("gguf", "moe")):
        assert models[fmt, layout, 4096][1].page_aligned == len(models[fmt, layout, 4096][1])
        assert models[fmt, layout, 32][1].page_aligned < len(models[fmt, layout, 32][1]) // 2


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("layout", ["dense", "moe"])
@pytest.mark.parametrize("size", ["1MiB", "3MB", "10MiB"])
def test_size_close_to_target(tmp_path, fmt, layout, size):
    index = write_synthetic(tmp_path / f"m.{fmt}", format=fmt, layout=layout, size=parse_size(size))
    assert abs(index.size - parse_size(size)) <= 0.1 * parse_size(size)
    assert index.size == (tmp_path / f"m.{fmt}").stat().st_size


def test_gguf_values_are_finite(models):
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(models["gguf", "moe", 32][0])
    for rt in reader.tensors[:12]:
        assert np.isfinite(dequantize(rt.data, rt.tensor_type)).all(), rt.name


def test_too_small_a_size_is_a_param_error(tmp_path):
    from workbench.errors import ParamError

    with pytest.raises(ParamError, match="too small"):
        write_synthetic(tmp_path / "x.gguf", format="gguf", layout="moe", size=4096)
    assert not list(tmp_path.iterdir())  # no partial file left behind


@pytest.mark.parametrize("text,expected", [("256MiB", 256 << 20), ("1GiB", 1 << 30), ("500MB", 500 * 10**6),
                                           ("4096", 4096), ("2 KiB", 2048), ("1.5GiB", 3 << 29),
                                           ("10KB", 10_000), ("7B", 7), ("3gb", 3 * 10**9), (123, 123)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "12 parsecs", "-5MiB", "0"])
def test_parse_size_rejects(text):
    from workbench.errors import ParamError

    with pytest.raises(ParamError):
        parse_size(text)

