"""Routing traces: seeded synthetic traces (uniform, Zipf-skewed) and trace files, validated in one line."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import TraceError
from workbench.expert.routing import load_trace, moe_shape, save_trace, synthetic_trace
from workbench.formats.index import ExpertBlob


@pytest.mark.parametrize("distribution", ["uniform", "zipf"])
def test_synthetic_trace_shape_range_and_distinct_experts(distribution):
    tr = synthetic_trace(300, [0, 2, 5], 16, 4, distribution=distribution, seed=7)
    assert tr.experts.shape == (300, 3, 4) and tr.layers == (0, 2, 5) and tr.k == 4 and tr.tokens == 300
    assert tr.experts.min() >= 0 and tr.experts.max() < 16
    srt = np.sort(tr.experts, axis=2)
    assert (np.diff(srt, axis=2) > 0).all()  # k distinct experts per (token, layer), as top-k routing
    assert not tr.experts.flags.writeable


def test_same_seed_same_trace_other_seed_other_trace():
    a = synthetic_trace(50, 2, 32, 2, seed=1)
    assert np.array_equal(a.experts, synthetic_trace(50, 2, 32, 2, seed=1).experts)
    assert not np.array_equal(a.experts, synthetic_trace(50, 2, 32, 2, seed=2).experts)


def test_zipf_is_skewed_per_layer_and_uniform_is_not():
    n, tokens = 32, 4000
    uni = synthetic_trace(tokens, 2, n, 2, seed=0)
    zipf = synthetic_trace(tokens, 2, n, 2, distribution="zipf", zipf_s=1.2, seed=0)
    share = lambda tr, layer: np.bincount(tr.experts[:, layer].ravel(), minlength=n) / (tokens * 2)  # noqa: E731
    assert share(uni, 0).max() < 2.0 / n  # about 1/n each
    hot = [int(np.argmax(share(zipf, layer))) for layer in range(2)]
    assert all(share(zipf, layer).max() > 4.0 / n for layer in range(2))
    assert hot[0] != hot[1]  # each layer has its own popular experts (seed 0)
    # the expert sets reused across tokens: the skew is what makes a cache hit
    assert len(np.unique(zipf.experts[:100, 0])) < len(np.unique(uni.experts[:100, 0]))


def test_token_replays_from_the_start():
    tr = synthetic_trace(5, 1, 8, 2, seed=3)
    assert np.array_equal(tr.token(7), tr.experts[2])


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_save_and_load_round_trip(tmp_path, suffix):
    tr = synthetic_trace(20, [1, 3], 8, 3, distribution="zipf", seed=4)
    path = tmp_path / f"t{suffix}"
    save_trace(tr, path)
    back = load_trace(path, layers=[1, 3], n_experts=8)
    assert np.array_equal(back.experts, tr.experts) and back.layers == (1, 3) and back.source == str(path)


def test_csv_without_header_and_rows_in_any_order(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("1,0,5\n0,0,2\n0,1,3\n1,1,4\n0,0,7\n1,0,6\n0,1,1\n1,1,0\n")
    tr = load_trace(path, layers=[0, 1], n_experts=8)
    assert tr.experts.tolist() == [[[2, 7], [3, 1]], [[5, 6], [4, 0]]]  # file order kept within a layer


def test_structured_npy(tmp_path):
    rows = np.array([(0, 0, 1), (0, 0, 2), (1, 0, 3), (1, 0, 0)],
                    dtype=[("token", "i4"), ("layer", "i4"), ("expert", "i4")])
    np.save(tmp_path / "t.npy", rows)
    assert load_trace(tmp_path / "t.npy").experts.tolist() == [[[1, 2]], [[3, 0]]]


BAD_CSV = [  # (file text, the model's MoE layers, what the one-line error must say)
    ("0,0,1\n0,0,x\n", None, "line 2: expected three non-negative integers"),
    ("0,0,1\n0,0,-1\n", None, "line 2"),
    ("0,0,1\n0,1\n", None, "line 2"),
    ("0,0,1\n0,0,9\n", None, "expert 9 out of range (the model has 8 experts"),
    ("0,0,1\n0,1,2\n0,2,3\n", [0, 1], "layers 2 are not MoE layers"),
    ("0,0,1\n", [0, 1], "missing MoE layers 1"),
    ("0,0,1\n0,0,2\n1,0,3\n0,1,1\n0,1,2\n1,1,3\n1,1,4\n", [0, 1], "token 1 layer 0 routes 1 experts"),
    ("0,0,1\n0,0,1\n0,1,2\n0,1,3\n", [0, 1], "token 0 layer 0 names an expert twice"),
    ("", None, "empty trace"),
]


@pytest.mark.parametrize("text,layers,message", BAD_CSV)
def test_bad_csv_is_one_line_error(tmp_path, text, layers, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        load_trace(path, layers=layers, n_experts=8)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("array,message", [
    (np.zeros((4, 2), np.int64), "shape (N, 3)"),
    (np.zeros((4, 3), np.float32), "float32"),
    (np.array([[0, 0, 1], [0, -1, 2]]), "row 1: layer -1 out of range"),
])
def test_bad_npy_is_one_line_error(tmp_path, array, message):
    np.save(tmp_path / "bad.npy", array)
    with pytest.raises(TraceError) as err:
        load_trace(tmp_path / "bad.npy")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.csv")
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(TraceError, match="not a readable .npy"):
        load_trace(tmp_path / "junk.npy")


@pytest.mark.parametrize("kw,message", [
    ({"k": 9}, "k=9"), ({"k": 0}, "k=0"), ({"distribution": "pareto"}, "pareto"),
    ({"zipf_s": 0.0, "distribution": "zipf"}, "s=0"), ({"tokens": 0}, "tokens"),
])
def test_bad_synthetic_arguments(kw, message):
    args = {"tokens": 4, "layers": 2, "n_experts": 8, "k": 2} | kw
    with pytest.raises(TraceError, match=message):
        synthetic_trace(args.pop("tokens"), args.pop("layers"), args.pop("n_experts"), args.pop("k"), **args)


def test_moe_shape_of_a_model():
    blobs = [ExpertBlob(layer, name, 8, 4096, True, ((0, 4096),) * 8, ("t",)) for layer in (3, 1) for name in ("up", "down")]
    assert moe_shape(blobs) == ((1, 3), 8)
    with pytest.raises(TraceError, match="no expert blobs"):
        moe_shape([])
