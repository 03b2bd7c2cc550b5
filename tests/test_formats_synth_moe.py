"""Synthetic MoE models look like real ones: page-multiple experts at every size, the alignment
decides whether copy-free placement can engage, and gpt-oss style stacked safetensors experts index."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert import plan_placements
from workbench.formats import PAGE_SIZE, open_index
from workbench.formats.synth import write_synthetic
from workbench.formats.synth_dims import page_multiple_width
from workbench.formats.synth_layout import _LADDER, Dims, _nbytes


@pytest.mark.parametrize("dtype", ["Q4_0", "F16"])
@pytest.mark.parametrize("hidden", _LADDER)
def test_every_ladder_width_gives_page_multiple_experts(hidden, dtype):
    d = Dims(hidden, 1, 256, 8, dtype)
    assert d.expert_ff % 32 == 0
    assert _nbytes(dtype, (d.expert_ff, hidden)) % PAGE_SIZE == 0
    assert page_multiple_width(hidden, dtype) <= d.expert_ff


def test_a3b_expert_is_216_pages():
    d = Dims(2048, 48, 151936, 128, "Q4_0")
    assert d.expert_ff == 768  # not widened: 768 x 2048 is already a page multiple
    assert _nbytes("Q4_0", (d.expert_ff, d.hidden)) == 216 * PAGE_SIZE


@pytest.mark.parametrize("size", [1 << 20, 3 << 20, 12 << 20])
@pytest.mark.parametrize("fmt,expert_layout", [("gguf", None), ("safetensors", "split"),
                                               ("safetensors", "stacked")])
def test_expert_strides_are_page_multiples_at_every_size(tmp_path, size, fmt, expert_layout):
    index = write_synthetic(tmp_path / f"m.{fmt}", format=fmt, layout="moe", size=size, experts=4,
                            alignment=64, expert_layout=expert_layout)
    weights = [b for b in index.blobs if "bias" not in b.name]  # gpt-oss biases are tiny, as in real files
    assert weights and all(b.stride % PAGE_SIZE == 0 and b.n_experts == 4 for b in weights)
    assert abs(index.size - size) <= 0.1 * size


@pytest.mark.parametrize("size", [1 << 20, 5 << 20])
def test_alignment_64_places_every_blob(tmp_path, size):
    index = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=size, experts=4, alignment=64)
    assert all(b.offset % PAGE_SIZE % 64 == 0 for b in index.blobs)
    assert any(b.offset % PAGE_SIZE for b in index.blobs)  # off page boundaries, as in real files
    plans, report = plan_placements(index.blobs)
    assert report.state == "ON" and report.placed == len(index.blobs) > 0, str(report)


@pytest.mark.parametrize("alignment", [32, 16])
def test_alignment_below_64_declines_with_its_reason(tmp_path, alignment):
    index = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=1 << 20, experts=4,
                            alignment=alignment)
    assert index.alignment == alignment
    assert all(b.offset % 64 == alignment for b in index.blobs)
    _, report = plan_placements(index.blobs)
    assert report.state == "INERT"
    assert "under-align" in str(report) and "not a multiple of 64 B" in str(report)


def test_alignment_4096_puts_blobs_on_page_boundaries(tmp_path):
    index = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=1 << 20, experts=4,
                            alignment=4096)
    assert all(b.offset % PAGE_SIZE == 0 for b in index.blobs)
    assert plan_placements(index.blobs)[1].state == "ON"


def test_stacked_safetensors_experts_are_blobs_with_the_right_bytes(tmp_path):
    from safetensors.numpy import load_file

    path = tmp_path / "m.safetensors"
    index = write_synthetic(path, format="safetensors", layout="moe", size=1 << 20, experts=4,
                            expert_layout="stacked")
    names = {(b.layer, b.name) for b in index.blobs}
    layers = {layer for layer, _ in names}
    assert names == {(layer, n) for layer in layers for n in ("gate_up", "gate_up_bias", "down", "down_bias")}
    arrays = load_file(path)  # the safetensors package agrees on every expert's bytes
    data = path.read_bytes()
    for blob in index.blobs:
        (name,) = blob.tensors
        assert name.startswith(f"model.layers.{blob.layer}.mlp.experts.")
        assert blob.contiguous and blob.stride * blob.n_experts == index.tensor(name).nbytes
        for e, (offset, nbytes) in enumerate(blob.slices):
            assert data[offset:offset + nbytes] == arrays[name][e].tobytes()
    assert not any(".router." in n for b in index.blobs for n in b.tensors)


def test_stacked_safetensors_written_by_the_package(tmp_path):
    from safetensors.numpy import save_file

    arrays = {"model.layers.0.mlp.experts.gate_up_proj": np.arange(3 * 4 * 8, dtype=np.float16).reshape(3, 4, 8),
              "model.layers.0.mlp.experts.gate_up_proj_bias": np.zeros((3, 8), np.float16),
              "model.layers.0.mlp.shared_experts.gate_proj.weight": np.zeros((4, 4), np.float16),
              "model.layers.0.mlp.router.weight": np.zeros((3, 4), np.float16)}
    save_file(arrays, tmp_path / "m.safetensors")
    index = open_index(tmp_path / "m.safetensors")
    blobs = {b.name: b for b in index.blobs}
    assert set(blobs) == {"gate_up", "gate_up_bias"}
    assert (blobs["gate_up"].n_experts, blobs["gate_up"].stride) == (3, 4 * 8 * 2)


def test_gguf_experts_cannot_be_split(tmp_path):
    with pytest.raises(ParamError, match="expert_layout"):
        write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=1 << 20, expert_layout="split")


def test_cli_writes_and_inspects_stacked_experts(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "m.safetensors"
    runner = CliRunner()
    res = runner.invoke(main, ["synth", str(out), "--format", "safetensors", "--layout", "moe", "--size", "1MiB",
                               "--experts", "4", "--expert-layout", "stacked"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["inspect", str(out), "--json", "--no-hash"])
    assert res.exit_code == 0, res.output
    blobs = json.loads(res.stdout)["experts"]["blobs"]
    gate_up = [b for b in blobs if b["name"] == "gate_up"]
    assert gate_up and all(b["n_experts"] == 4 and b["stride"] % PAGE_SIZE == 0 and b["stride_page_multiple"]
                           for b in gate_up)
