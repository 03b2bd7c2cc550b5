"""Routing traces from engines (workbench/expert/traces): every format read from files written the way
engines and research hooks write them, the gap rule, and every bad or hostile trace one bounded line."""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from workbench.errors import TraceError
from workbench.expert.routing import load_trace
from workbench.expert.traces import MAX_EXPERTS, dense_routing, read_trace


def hook_records(tokens=6, layers=(1, 3), n=8, k=2, seed=0):
    """What a router hook dumps: torch's softmax + topk over random logits, ids and weights per (token, layer)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in range(tokens):
        for layer in layers:
            probs = torch.softmax(torch.randn(n, generator=gen), dim=0)
            weights, ids = torch.topk(probs, k)
            out.append({"layer": layer, "token_pos": t, "topk_ids": ids.tolist(), "topk_weights": weights.tolist(),
                        "request_id": "r0"})
    return out


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_jsonl_from_a_router_hook_keeps_gate_weights(tmp_path):
    records = hook_records()
    tr = read_trace(write_jsonl(tmp_path / "hook.jsonl", records))
    assert tr.layers == (1, 3) and tr.k == 2 and tr.tokens == 6 and tr.complete and tr.gates is not None
    for r in records:
        i = tr.layers.index(r["layer"])
        assert tr.experts[i][r["token_pos"]].tolist() == r["topk_ids"]
        assert np.allclose(tr.gates[i][r["token_pos"]], r["topk_weights"])
    dense = load_trace(tmp_path / "hook.jsonl", layers=[1, 3], n_experts=8)
    assert dense.experts.shape == (6, 2, 2) and dense.gates.shape == (6, 2, 2) and dense.note == ""


def test_jsonl_spellings_and_no_gates(tmp_path):
    path = tmp_path / "t.ndjson"
    path.write_text('{"layer": 0, "token": 1, "experts": [3, 1]}\n\n{"layer_idx": 0, "token_idx": 0, '
                    '"expert_ids": [2, 0]}\n')
    tr = read_trace(path)
    assert tr.gates is None and tr.positions[0].tolist() == [0, 1] and tr.experts[0].tolist() == [[2, 0], [3, 1]]


def test_vllm_routed_experts_array_maps_to_the_models_moe_layers(tmp_path):
    import torch

    routed = torch.topk(torch.rand(5, 3, 8, generator=torch.Generator().manual_seed(1)), 2).indices  # [tokens, layers, k]
    np.save(tmp_path / "routed.npy", routed.numpy())
    tr = read_trace(tmp_path / "routed.npy")
    assert tr.layer_kind == "ordinal" and tr.layers == (0, 1, 2) and tr.k == 2
    dense = dense_routing(tr, layers=[1, 3, 5], n_experts=8)  # a model whose MoE layers are 1, 3, 5
    assert dense.layers == (1, 3, 5) and np.array_equal(dense.experts, routed.numpy())
    assert "MoE layer i of the model" in dense.note
    with pytest.raises(TraceError, match="the model has 2"):
        dense_routing(tr, layers=[1, 3], n_experts=8)


def test_csv_written_by_pandas(tmp_path):
    frame = pd.DataFrame({"token": [0, 0, 1, 1], "layer": [2, 2, 2, 2], "expert": [5, 1, 4, 5]})
    frame.to_csv(tmp_path / "t.csv", index=False)
    tr = read_trace(tmp_path / "t.csv")
    assert tr.layers == (2,) and tr.experts[0].tolist() == [[5, 1], [4, 5]]


def gappy(tmp_path):
    """Layer 0 records tokens 0-5, layer 1 tokens 0-2 and 4-5 (token 3 missing), with an all -1 gap."""
    arr = np.array([[[0, 1], [2, 3]], [[0, 2], [2, 4]], [[1, 2], [3, 4]], [[1, 3], [-1, -1]],
                    [[3, 4], [4, 5]], [[3, 5], [4, 6]]], dtype=np.int16)
    np.save(tmp_path / "gaps.npy", arr)
    return tmp_path / "gaps.npy"


def test_gaps_a_missing_token_is_a_gap_in_its_layer_and_dropped_from_a_session(tmp_path):
    tr = read_trace(gappy(tmp_path))
    assert tr.positions[0].tolist() == [0, 1, 2, 3, 4, 5] and tr.positions[1].tolist() == [0, 1, 2, 4, 5]
    assert not tr.complete and tr.runs(1).tolist() == [0, 3, 5]
    dense = dense_routing(tr)
    assert dense.tokens == 5 and "1 of 6 tokens dropped" in dense.note
    assert dense.experts[3].tolist() == [[3, 4], [4, 5]]  # token 4: after the dropped token 3


def test_a_model_layer_missing_from_the_trace_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"layer": 1, "token": 0, "experts": [0, 1]}])
    with pytest.raises(TraceError, match="missing MoE layers 3"):
        load_trace(path, layers=[1, 3], n_experts=8)


def npy_declaring(tmp_path, shape, dtype="<i8"):
    """A tiny .npy whose header declares ``shape`` and that holds a few bytes of data."""
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    path = tmp_path / "huge.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 48)
    return path


@pytest.mark.parametrize("shape", [(10**11, 3), (10**6, 64, 8), (2**62, 2**62, 3)])
def test_a_npy_declaring_more_than_it_holds_is_refused_before_allocating(tmp_path, shape):
    path = npy_declaring(tmp_path, shape)
    t0 = time.process_time()
    with pytest.raises(TraceError, match="declares shape") as err:
        read_trace(path)
    assert time.process_time() - t0 < 1.0 and str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_trace_over_the_id_limit_is_refused(tmp_path, monkeypatch):
    import workbench.expert.traces.limits as limits

    np.save(tmp_path / "t.npy", np.zeros((40, 2, 2), np.int32))
    monkeypatch.setattr(limits, "MAX_IDS", 100)
    with pytest.raises(TraceError, match="more than a trace may hold"):
        read_trace(tmp_path / "t.npy")
    path = write_jsonl(tmp_path / "t.jsonl", [{"layer": 0, "token": t, "experts": [0, 1]} for t in range(60)])
    with pytest.raises(TraceError, match="more than a trace may hold"):
        read_trace(path)


BAD_NPY = [
    (np.array([[0, 0, 1], [0, 0, 2**63 + 5]], dtype=np.uint64), "row 1: expert 9223372036854775813 out of range"),
    (np.array([[0, 0, MAX_EXPERTS]]), f"expert {MAX_EXPERTS} out of range"),
    (np.array([[[0, -5]]], dtype=np.int32), "token 0 layer 0: expert -5 out of range"),
    (np.array([[[0, 1]], [[2, 2]]], dtype=np.int32), "names an expert twice"),
    (np.array([[1, 2]], dtype=object), "objects"),
    (np.zeros((2, 2, 2, 2), np.int32), "expected an integer array"),
]


@pytest.mark.parametrize("array,message", BAD_NPY)
def test_bad_npy_is_one_line(tmp_path, array, message):
    np.save(tmp_path / "bad.npy", array, allow_pickle=True)
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        read_trace(tmp_path / "bad.npy")


def test_a_truncated_npy_is_one_line(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((100, 3), np.int64))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-8])
    with pytest.raises(TraceError, match="declares shape"):
        read_trace(tmp_path / "t.npy")


BAD_CSV = [
    ("0,0,1\n0,0,100000000000000000000\n", "line 2: expert 100000000000000000000 out of range"),
    ("0,0,1\n0,70000,2\n", "line 2: layer 70000 out of range"),
    ("0,0,1\n0,0,2,3\n", "not a token,layer,expert CSV"),
    ("0,0,1\n0,0,1e3\n", "line 2: expected three non-negative integers"),
    ("token,layer,expert\n0,0,\x1b]52;c;aGk=\x07\n", "line 2"),
]


@pytest.mark.parametrize("text,message", BAD_CSV)
def test_bad_csv_is_one_line(tmp_path, text, message):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(TraceError, match=message) as err:
        read_trace(tmp_path / "bad.csv")
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)


def test_leading_zeros_are_not_out_of_range(tmp_path):
    (tmp_path / "t.csv").write_text("0,0,0000000000000000000001\n0,0,2\n")
    assert read_trace(tmp_path / "t.csv").experts[0].tolist() == [[1, 2]]


BAD_JSONL = [
    ('{"layer": 0, "token": 0, "experts": [1, 2]}\n' + "[" * 100_000 + "]" * 100_000 + "\n", "line 2: not a JSON"),
    ('{"layer": 0, "token": 0, "experts": [1, 100000000000000000000]}\n', "line 1: expert 100000000000000000000 is not"),
    ('{"layer": 0, "token": 0, "experts": [1, 2.0]}\n', "line 1: expert 2.0 is not an integer"),
    ('{"layer": true, "token": 0, "experts": [1, 2]}\n', "line 1: layer True is not an integer"),
    ('{"layer": 0, "token": 0, "experts": [1, 2]}\n{"layer": 0, "token": 1, "experts": [1]}\n', "line 2: 1 experts"),
    ('{"layer": 0, "token": 0, "experts": [1, 2], "gating_probs": [0.5, 0.2]}\n{"layer": 0, "token": 1, '
     '"experts": [1, 3]}\n', "line 2: no gating_probs"),
    ('{"layer": 0, "token": 0, "experts": [1, 2]}\n{"layer": 0, "token": 1, "experts": [1, 3], "gates": [1, 0]}\n',
     "line 2: has gate weights where the first record has none"),
    ('{"layer": 0, "token": 0, "experts": [1, 2], "gates": [NaN, 0.1]}\n', "finite numbers"),
    ('{"layer": 0, "token": 0, "experts": [1, 2]}\n{"layer": 0, "token": 0, "experts": [3, 2]}\n',
     "token 0 layer 0 is recorded twice"),
    ('{"layer": 0, "experts": [1, 2]}\n', "line 1: no token / token_pos / token_idx field"),
    ('[1, 2]\n', "expected a JSON object"),
    (b'{"layer": 0, "token": 0, "experts": [1, 2]}\n\xff\xfe\n', "line 2: not a JSON record"),
    ("", "empty trace"),
]


@pytest.mark.parametrize("text,message", BAD_JSONL)
def test_bad_jsonl_is_one_line(tmp_path, text, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(TraceError, match=message) as err:
        read_trace(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_jsonl_line_longer_than_the_limit_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    import workbench.expert.traces.jsonl as jsonl

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.jsonl"
    path.write_text('{"layer": 0, "token": 0, "experts": [1, 2], "pad": "' + "x" * 5000 + '"}\n')
    with pytest.raises(TraceError, match="line 1: longer than 1,000 bytes"):
        read_trace(path)


def test_one_endless_line_and_a_device_are_refused_bounded(tmp_path, monkeypatch):
    import os

    import workbench.expert.traces.text as text

    monkeypatch.setattr(text, "MAX_LINE_BYTES", 1 << 16)
    path = tmp_path / "one-line.csv"
    path.write_text("0,0,1\n" + "7" * (1 << 20))
    with pytest.raises(TraceError, match="a line longer than 65,536 bytes"):
        read_trace(path)
    (tmp_path / "ok.csv").write_text("token,layer,expert\n" + "".join(f"{t},0,1\n{t},0,2\n" for t in range(50_000)))
    assert read_trace(tmp_path / "ok.csv").experts[0].shape == (50_000, 2)  # many short lines pass
    os.mkfifo(tmp_path / "fifo.jsonl")
    for device in ("/dev/zero", tmp_path / "fifo.jsonl"):
        with pytest.raises(TraceError, match="not a regular file"):
            read_trace(device)


def test_a_model_file_is_not_read_as_a_trace(tmp_path):
    (tmp_path / "m.json").write_text("{}")
    with pytest.raises(TraceError, match="a routing model"):
        read_trace(tmp_path / "m.json")


def test_a_dump_of_several_requests_is_laid_end_to_end_each_its_own_run(tmp_path):
    from workbench.expert.traces import trace_stats

    records = [{"layer": 0, "token_idx": t, "topk_ids": [t % 4, 4 + t % 2], "request_id": rid}
               for rid in ("a", "b") for t in range(3)]
    records.insert(2, records.pop())  # interleaved, as a batched engine writes them
    tr = read_trace(write_jsonl(tmp_path / "batch.jsonl", records))
    assert tr.positions[0].tolist() == [0, 1, 2, 4, 5, 6] and tr.runs(0).tolist() == [0, 3, 6]
    row = trace_stats(tr).summary.iloc[0]
    assert row["runs"] == 2 and row["overlap"] == 0.0  # token 2 of "a" is not token 0 of "b"'s predecessor
    dense = dense_routing(tr)
    assert dense.tokens == 6 and dense.note == ""  # a session replays "a" then "b"


PLAIN = ["token,layer,expert\n0,0,1\n0,0,2\n1,0,3\n1,0,0\n", "0,0,1\n\n0,0,2\n1,0,3\n1,0,0\n",
         "0,0,0001\r\n0,0,2\r\n1,0,3\r\n1,0,0\r\n", " 0, 0 ,1\n0,0,2\n1,0,3\n1,0,0"]
ODD = ["0,0,1\n0,0,1e3\n", "0,0,1\n0,0,+2\n", "0,0,1\n0,0,2.0\n", "0,0,1\n0,0,-2\n", "0,0,1\n0,0,70000\n",
       "0,0,1\n0,0,2,3\n", "0,0,1\n0,0\n", "token,layer,expert\n0,0,x\n"]


@pytest.mark.parametrize("text", PLAIN)
def test_the_fast_csv_pass_reads_plain_files_as_the_careful_one_does(tmp_path, text, monkeypatch):
    import workbench.expert.traces.text as csv_text

    (tmp_path / "t.csv").write_text(text)
    careful = csv_text._read(str(tmp_path / "t.csv"), fast=False)
    monkeypatch.setattr(csv_text, "_checked", None)  # the careful pass is not needed for these
    assert np.array_equal(read_trace(tmp_path / "t.csv").experts[0], careful[:, 2].reshape(2, 2))


@pytest.mark.parametrize("text", ODD)
def test_the_fast_csv_pass_leaves_anything_odd_to_the_careful_one(tmp_path, text):
    import workbench.expert.traces.text as csv_text

    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(csv_text._NotPlain):
        csv_text._read(str(tmp_path / "t.csv"), fast=True)
    with pytest.raises(TraceError):
        read_trace(tmp_path / "t.csv")
