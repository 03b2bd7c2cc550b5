"""MoE expert blobs: GGUF stacked tensors split by stride, safetensors per-expert tensors grouped."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import FormatError
from workbench.formats import PAGE_SIZE, open_index
from workbench.formats.index import TensorInfo
from workbench.formats.moe import group_gguf_experts, group_safetensors_experts
from workbench.formats.synth import write_synthetic


@pytest.mark.parametrize("alignment", [32, 4096])
def test_gguf_blobs_from_stacked_tensors(tmp_path, alignment):
    index = write_synthetic(tmp_path / "m.gguf", format="gguf", layout="moe", size=2 << 20, experts=6,
                            alignment=alignment)
    stacked = [t for t in index if t.name.endswith("_exps.weight")]
    layers = {int(t.name.split(".")[1]) for t in stacked}
    assert len(index.blobs) == len(stacked) == 3 * len(layers)
    for blob in index.blobs:
        (name,) = blob.tensors
        t = index.tensor(name)
        assert name == f"blk.{blob.layer}.ffn_{blob.name}_exps.weight"
        assert blob.n_experts == t.shape[0] == 6
        assert blob.stride * 6 == t.nbytes and blob.contiguous
        assert [o for o, _ in blob.slices] == [t.offset + e * blob.stride for e in range(6)]
        assert blob.span == (t.offset, t.end)
        if alignment == 4096:
            assert blob.offset % PAGE_SIZE == 0


def test_gguf_expert_slices_are_the_experts(tmp_path):
    from gguf import GGUFReader

    path = tmp_path / "m.gguf"
    index = write_synthetic(path, format="gguf", layout="moe", size=2 << 20, experts=4)
    reader = {t.name: t for t in GGUFReader(path).tensors}
    blob = index.blobs[0]
    raw = reader[blob.tensors[0]].data  # gguf-py's byte view, experts first
    data = path.read_bytes()
    for e, (offset, nbytes) in enumerate(blob.slices):
        assert data[offset:offset + nbytes] == np.ascontiguousarray(raw[e]).tobytes()


def test_a3b_expert_stride_is_page_multiple():
    t = TensorInfo("blk.3.ffn_gate_exps.weight", 10_000, 128 * 884736, "Q4_0", (128, 768, 2048))
    (blob,) = group_gguf_experts("m.gguf", [t])
    assert (blob.layer, blob.name, blob.n_experts, blob.stride) == (3, "gate", 128, 884736)
    assert blob.stride == 216 * PAGE_SIZE
    assert {o % PAGE_SIZE for o, _ in blob.slices} == {10_000 % PAGE_SIZE}  # constant remainder


def test_gguf_stacked_tensor_not_divisible(tmp_path):
    t = TensorInfo("blk.0.ffn_up_exps.weight", 0, 1001, "Q4_0", (4, 32, 32))
    with pytest.raises(FormatError, match="ffn_up_exps"):
        group_gguf_experts("m.gguf", [t])


def test_safetensors_synth_blobs_are_contiguous(tmp_path):
    index = write_synthetic(tmp_path / "m.safetensors", format="safetensors", layout="moe", size=2 << 20,
                            experts=5)
    assert index.blobs and all(b.contiguous and b.n_experts == 5 for b in index.blobs)
    for blob in index.blobs:
        assert blob.tensors == tuple(f"model.layers.{blob.layer}.mlp.experts.{e}.{blob.name}_proj.weight"
                                     for e in range(5))
        assert blob.stride == index.tensor(blob.tensors[0]).nbytes
        assert not any("shared" in n for n in blob.tensors)


def st_tensor(name: str, offset: int, nbytes: int = 100) -> TensorInfo:
    return TensorInfo(name, offset, nbytes, "F16", (nbytes // 2,))


def test_safetensors_interleaved_experts_have_constant_stride():
    names = [f"model.layers.2.mlp.experts.{e}.{p}_proj.weight" for e in range(4) for p in ("down", "gate", "up")]
    tensors = [st_tensor(n, 1000 + 100 * i) for i, n in enumerate(names)]
    blobs = {b.name: b for b in group_safetensors_experts(tensors)}
    assert set(blobs) == {"gate", "up", "down"}
    gate = blobs["gate"]
    assert (gate.layer, gate.n_experts, gate.stride, gate.contiguous) == (2, 4, 300, False)
    assert [o for o, _ in gate.slices] == [1100, 1400, 1700, 2000]


def test_safetensors_expert_order_is_numeric_and_irregular_stride_is_zero():
    # Name-sorted files put expert 10 before expert 2: slices must still come in expert order.
    order = sorted(range(12), key=str)
    tensors = [st_tensor(f"model.layers.0.mlp.experts.{e}.up_proj.weight", 100 * i) for i, e in enumerate(order)]
    (blob,) = group_safetensors_experts(tensors)
    assert blob.tensors[2] == "model.layers.0.mlp.experts.2.up_proj.weight"
    assert blob.stride == 0 and not blob.contiguous and blob.n_experts == 12


def test_safetensors_scale_tensors_get_their_own_blob():
    tensors = [st_tensor(f"model.layers.1.mlp.experts.{e}.down_proj.{s}", 1000 * e + (0 if s == "weight" else 500))
               for e in range(3) for s in ("weight", "weight_scale_inv")]
    names = sorted(b.name for b in group_safetensors_experts(tensors))
    assert names == ["down", "down.weight_scale_inv"]


def test_safetensors_package_written_file(tmp_path):
    from safetensors.numpy import save_file

    arrays = {f"model.layers.{layer}.mlp.experts.{e}.{p}_proj.weight": np.full((8, 4), e, np.float16)
              for layer in range(2) for e in range(3) for p in ("gate", "up", "down")}
    arrays["model.layers.0.mlp.shared_experts.gate_proj.weight"] = np.zeros((8, 4), np.float16)
    save_file(arrays, tmp_path / "m.safetensors")
    index = open_index(tmp_path / "m.safetensors")
    assert len(index.blobs) == 6 and {b.n_experts for b in index.blobs} == {3}
    data = (tmp_path / "m.safetensors").read_bytes()
    for blob in index.blobs:
        for e, (offset, nbytes) in enumerate(blob.slices):
            assert np.frombuffer(data[offset:offset + nbytes], np.float16).tolist() == [e] * 32


def test_dense_models_have_no_blobs(tmp_path):
    for fmt in ("gguf", "safetensors"):
        assert not write_synthetic(tmp_path / f"d.{fmt}", format=fmt, layout="dense", size=1 << 20).blobs


def test_mixtral_expert_names_are_grouped_like_the_rest():
    # block_sparse_moe.experts.E.w1|w3|w2 are gate|up|down (found in review: Mixtral read as dense)
    tensors = [st_tensor(f"model.layers.3.block_sparse_moe.experts.{e}.{w}.weight", 1000 * (3 * e + k))
               for e in range(4) for k, w in enumerate(("w1", "w3", "w2"))]
    tensors.append(st_tensor("model.layers.3.block_sparse_moe.gate.weight", 99_000))  # the router
    blobs = group_safetensors_experts(tensors)
    assert sorted((b.layer, b.name, b.n_experts) for b in blobs) == [(3, "down", 4), (3, "gate", 4), (3, "up", 4)]
