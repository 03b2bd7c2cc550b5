"""Synthetic content: deterministic from the seed, varied, and written with bounded memory."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest

from workbench.formats.synth import CHUNK_BYTES, write_synthetic


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("fmt,layout", [("gguf", "moe"), ("safetensors", "dense")])
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, fmt, layout):
    kw = dict(format=fmt, layout=layout, size=1 << 20, experts=4)
    a = write_synthetic(tmp_path / f"a.{fmt}", seed=3, **kw)
    b = write_synthetic(tmp_path / f"b.{fmt}", seed=3, **kw)
    c = write_synthetic(tmp_path / f"c.{fmt}", seed=4, **kw)
    assert digest(tmp_path / f"a.{fmt}") == digest(tmp_path / f"b.{fmt}")
    assert digest(tmp_path / f"a.{fmt}") != digest(tmp_path / f"c.{fmt}")
    assert [t.offset for t in a] == [t.offset for t in b] == [t.offset for t in c]  # same layout
    big = max(a, key=lambda t: t.nbytes)
    assert _read(tmp_path / f"a.{fmt}", big) != _read(tmp_path / f"c.{fmt}", big)


def test_content_varies_between_and_within_tensors(tmp_path):
    path = tmp_path / "m.gguf"
    index = write_synthetic(path, format="gguf", layout="dense", size=2 << 20, seed=0)
    big = [t for t in index if t.nbytes >= 8192]
    heads = {_read(path, t)[:4096] for t in big}
    assert len(heads) == len(big)  # every tensor's content is its own
    for t in big:
        data = np.frombuffer(_read(path, t), dtype=np.uint8)
        assert data.any()
        assert data[:4096].tobytes() != data[4096:8192].tobytes()  # not one block repeated
        assert len(np.unique(data[:4096])) > 200  # looks random, not a pattern


def test_content_not_periodic_at_the_chunk_size(tmp_path, monkeypatch):
    import workbench.formats.synth as synth

    monkeypatch.setattr(synth, "CHUNK_BYTES", 4096)  # several chunks per tensor in a small file
    path = tmp_path / "m.safetensors"
    index = write_synthetic(path, format="safetensors", layout="dense", size=1 << 20)
    t = max(index, key=lambda t: t.nbytes)
    data = _read(path, t)
    assert t.nbytes > 3 * 4096
    assert len({data[i:i + 4096] for i in range(0, 3 * 4096, 4096)}) == 3


def _read(path, t) -> bytes:
    with open(path, "rb") as f:
        f.seek(t.offset)
        return f.read(t.nbytes)


_MEASURE = """
import json, resource, sys
from workbench.formats.synth import write_synthetic
import gguf, numpy  # noqa: F401 - imported before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
write_synthetic(sys.argv[1], format=sys.argv[2], layout="moe", size=int(sys.argv[3]), experts=8)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_memory_stays_bounded(tmp_path, fmt):
    size = 256 << 20
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path / f"big.{fmt}"), fmt, str(size)],
                         capture_output=True, text=True, check=True, timeout=300)
    rss = json.loads(out.stdout)
    growth = (rss["after_kib"] - rss["before_kib"]) * 1024
    assert (tmp_path / f"big.{fmt}").stat().st_size > 0.9 * size
    assert growth < 4 * CHUNK_BYTES + (16 << 20), f"peak RSS grew by {growth / 2**20:.0f} MiB"


_ONE_TENSOR = """
import json, resource
from workbench.formats.synth import _write_content
from workbench.formats.synth_layout import TensorSpec

class Sink:  # counts bytes instead of storing them: only the generator's memory is measured
    n = 0
    def write(self, b):
        self.n += len(b)

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sink = Sink()
_write_content(sink, TensorSpec("w", (1 << 30,), "F16", 1 << 31), 0, 0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after, "written": sink.n}))
"""


@pytest.mark.slow
def test_one_huge_tensor_is_streamed_in_chunks():
    out = subprocess.run([sys.executable, "-c", _ONE_TENSOR], capture_output=True, text=True, check=True,
                         timeout=300)
    rss = json.loads(out.stdout)
    assert rss["written"] == 1 << 31
    growth = (rss["after_kib"] - rss["before_kib"]) * 1024
    assert growth < 4 * CHUNK_BYTES + (16 << 20), f"peak RSS grew by {growth / 2**20:.0f} MiB for a 2 GiB tensor"


def test_synth_creates_missing_parent_directories(tmp_path):
    out = tmp_path / "data" / "models" / "m.gguf"
    index = write_synthetic(out, format="gguf", layout="dense", size=256 << 10)
    assert out.is_file() and index.path == str(out)


def test_bf16_safetensors_is_bf16_throughout_and_finite(tmp_path):
    from workbench.formats import open_index

    path = tmp_path / "m.safetensors"
    index = write_synthetic(path, format="safetensors", layout="dense", size=1 << 20, dtype="bf16", seed=2)
    assert {t.dtype for t in index} == {"BF16"} and open_index(path).nbytes == index.nbytes
    raw = np.frombuffer(path.read_bytes(), dtype=np.uint8)
    for t in index:
        words = raw[t.offset : t.offset + t.nbytes].view(np.uint16)
        as_f32 = (words.astype(np.uint32) << 16).view(np.float32)  # bf16 is the top half of an f32
        assert np.isfinite(as_f32).all() and (np.abs(as_f32) < 2).all()
        assert len(np.unique(words)) > min(100, words.size // 2)  # random, not a pattern


def test_llama3_8b_shape_fills_the_size_with_layers():
    from workbench.formats.synth_layout import plan_model

    specs, meta = plan_model("safetensors", "dense", 8 << 30, 8, 32, None, "bf16", "llama3-8b")
    by_name = {s.name: s for s in specs}
    assert len(specs) == 129 and meta["llama.block_count"] == 14  # the H200 profile's file
    assert sum(s.nbytes for s in specs) == 8_208_490_496
    assert by_name["model.embed_tokens.weight"].shape == (128256, 4096)
    assert by_name["model.layers.0.self_attn.k_proj.weight"].shape == (1024, 4096)
    assert by_name["model.layers.13.mlp.down_proj.weight"].shape == (4096, 14336)
    assert meta["shape"] == "llama3-8b" and meta["dtype"] == "bf16"


@pytest.mark.parametrize("kw, match", [
    (dict(format="safetensors", layout="dense", size=1 << 30, shape="llama3-8b"), "too small for a llama3-8b"),
    (dict(format="safetensors", layout="moe", size=8 << 30, shape="llama3-8b"), "dense model's shape"),
    (dict(format="safetensors", layout="dense", size=1 << 20, shape="gpt2"), "not one of llama3-8b"),
    (dict(format="gguf", layout="dense", size=1 << 20, dtype="bf16"), "quant mix"),
    (dict(format="safetensors", layout="dense", size=1 << 20, dtype="fp8"), "one of f16, bf16"),
])
def test_dtype_and_shape_refusals_say_why(tmp_path, kw, match):
    from workbench.errors import ParamError

    with pytest.raises(ParamError, match=match):
        write_synthetic(tmp_path / "x", **kw)
    assert not list(tmp_path.iterdir())  # nothing half-written
