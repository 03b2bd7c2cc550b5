"""Issue 34 §4: misses computed where they lie (``--miss fetch|host|auto``).

The host's products are checked against a reference decoded by hand from the file's own bytes (found
through gguf-py's reader, not our index) on a GGUF written by gguf-py's writer with F16, BF16, F32,
Q4_0 and Q8_0 experts; a session's host misses read exactly their experts' bytes; a type nothing here can
compute is one line; the session A/B over --miss. Auto's rule (whole tokens each way): test_expert_miss_auto.py."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from foreign_writers import write_gguf_moe
from one_line import one_error_line
from workbench.cli import main
from workbench.expert.miss import ArmCost, HostExperts, MissServer
from workbench.expert.miss.host import rhs
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig
from workbench.formats import open_index
from workbench.upload.host import HostDevice

DTYPES = {("0", "gate"): "F16", ("0", "up"): "BF16", ("0", "down"): "F32", ("1", "gate"): "Q4_0",
          ("1", "up"): "Q8_0", ("1", "down"): "F32"}
EXPERTS, ROWS, COLS = 4, 8, 64


def _write_gguf(path, kinds=DTYPES):
    return write_gguf_moe(path, lambda writer: _add(writer, kinds), blocks=2, experts=EXPERTS, used=2)


def _add(writer, kinds):
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import quantize

    rng = np.random.default_rng(3)
    for (layer, part), kind in kinds.items():
        w = rng.standard_normal((EXPERTS, ROWS, COLS)).astype(np.float32)
        name = f"blk.{layer}.ffn_{part}_exps.weight"
        if kind == "F16":
            writer.add_tensor(name, w.astype(np.float16))
        elif kind == "BF16":
            writer.add_tensor(name, (w.view(np.uint32) >> 16).astype(np.uint16), raw_dtype=Q.BF16)
        elif kind == "F32":
            writer.add_tensor(name, w)
        elif kind == "I32":
            writer.add_tensor(name, w.astype(np.int32))
        else:
            writer.add_tensor(name, quantize(w, Q[kind]), raw_dtype=Q[kind])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return _write_gguf(tmp_path_factory.mktemp("miss") / "mixed.gguf")


def _file_experts(path):
    """name → (ggml type name, [each expert's bytes]) as gguf-py's reader finds them in the file."""
    from gguf import GGUFReader

    out = {}
    data = open(path, "rb").read()
    for t in GGUFReader(str(path)).tensors:
        raw = data[t.data_offset:t.data_offset + int(t.n_bytes)]
        step = len(raw) // EXPERTS
        out[t.name] = (t.tensor_type.name, [raw[e * step:(e + 1) * step] for e in range(EXPERTS)])
    return out


def _f16(b):
    return struct.unpack("<e", b)[0]


def _decode(kind, raw):
    """An expert's bytes as ROWS x COLS float64, decoded by hand (no numpy view, no gguf-py)."""
    if kind == "F32":
        vals = struct.unpack(f"<{len(raw) // 4}f", raw)
    elif kind == "F16":
        vals = [_f16(raw[i:i + 2]) for i in range(0, len(raw), 2)]
    elif kind == "BF16":  # the two bytes are the top half of an f32
        vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    elif kind == "Q8_0":  # blocks of 32: f16 scale, 32 int8
        vals = []
        for i in range(0, len(raw), 34):
            d = _f16(raw[i:i + 2])
            vals += [d * q for q in struct.unpack("<32b", raw[i + 2:i + 34])]
    elif kind == "Q4_0":  # blocks of 32: f16 scale, 16 bytes: low nibbles are elements 0-15, high 16-31
        vals = []
        for i in range(0, len(raw), 18):
            d, qs = _f16(raw[i:i + 2]), raw[i + 2:i + 18]
            vals += [d * ((q & 0xF) - 8) for q in qs] + [d * ((q >> 4) - 8) for q in qs]
    else:
        raise AssertionError(kind)
    return np.array(vals, dtype=np.float64).reshape(ROWS, COLS)


def test_host_products_are_the_files_bytes_times_x(mixed):
    index = open_index(mixed)
    by_file = _file_experts(mixed)
    host = HostExperts(index.path, index.blobs, {t.name: t for t in index.tensors})
    try:
        for b, blob in enumerate(index.blobs):
            kind, experts = by_file[blob.tensors[0]]
            assert host.matrices[b].dtype == kind
            for e in range(EXPERTS):
                assert host.expert_bytes(b, e).tobytes() == experts[e]  # the bytes it reads are the file's
                touched = host.run([(b, e)])
                assert touched == len(experts[e])
                want = _decode(kind, experts[e]) @ rhs(COLS, b).astype(np.float64)
                np.testing.assert_allclose(host.last[(b, e)], want, rtol=1e-4, atol=1e-5)
    finally:
        host.close()


def test_a_type_nothing_here_computes_is_one_line_before_anything_is_recorded(tmp_path):
    path = _write_gguf(tmp_path / "ints.gguf", {**DTYPES, ("1", "up"): "I32"})
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, ["session", str(path), "--turns", "1", "--tokens", "1", "--miss", "host",
                                       "--ledger", str(ledger)])
    one_error_line(result, str(path), "blk.1.ffn_up_exps.weight", "I32", "--miss fetch")
    assert not ledger.exists()
    fetched = CliRunner().invoke(main, ["session", str(path), "--turns", "1", "--tokens", "1", "--ledger", str(ledger)])
    assert fetched.exit_code == 0, fetched.output  # fetching does not need numbers


# --- auto's running cost --------------------------------------------------------------------------
def test_the_running_cost_is_the_median_of_the_newest_tokens():
    c = ArmCost()
    c.add(1.0)
    c.add(2.0)
    assert c.seconds == pytest.approx(1.5) and c.samples == 2
    c.add(100.0)  # one preempted token does not move it far
    assert c.seconds == pytest.approx(2.0)
    for _ in range(7):
        c.add(3.0)
    assert c.seconds == 3.0 and c.samples == 10  # the window has moved on


class _Cache(set):
    """A cache holding (blob, expert) keys."""


class _Host:
    def __init__(self, seconds=0.0):
        self.keys, self.seconds = [], seconds

    def run(self, keys):
        self.keys += keys
        return 100 * len(keys)

    def describe(self):
        return "fake"


def test_fixed_ways_split_by_the_cache_and_count_what_they_served():
    cache = _Cache({(0, 1), (1, 1), (0, 2)})  # expert 1 cached in both blobs (a hit); expert 2 in one (a miss)
    host = _Host()
    s = MissServer("host", cache, {7: [0, 1]}, [7], host)
    assert s.split(0, 0, [1, 2, 3]) == [1]  # a hit lands; the misses are computed where they lie
    s.step_done(0, 0, 0.0, 0.0, 0.0)
    assert host.keys == [(0, 2), (1, 2), (0, 3), (1, 3)]
    f = MissServer("fetch", cache, {7: [0, 1]}, [7])
    assert f.split(0, 0, [1, 2, 3]) == [1, 2, 3]
    f.step_done(0, 0, 0.1, 0.0, 0.0)
    done, fetched = s.take_turn(), f.take_turn()
    assert (done.miss_fetched, done.miss_host, done.miss_host_bytes, done.host_entries) == (0, 2, 400, 4)
    assert (fetched.miss_fetched, fetched.miss_host) == (2, 0) and "host_entries" not in done.to_json()


# --- sessions ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lanes, overlap", [(1, False), (2, True)])
def test_a_host_session_computes_every_miss_from_the_file_and_fetches_nothing(mixed, lanes, overlap):
    index = open_index(mixed)
    by_file = _file_experts(mixed)
    cfg = SessionConfig(turns=2, tokens=3, miss="host", experts_per_token=2, lanes=lanes, overlap=overlap,
                        compute="device")
    with ExpertSession(index, HostDevice(), cfg) as s:
        records = list(s.turns())
        last = s.miss.host.last
        assert "host (every miss computed where it lies" in s.facts.miss
    layer_bytes = sum(len(by_file[b.tensors[0]][1][0]) for b in index.blobs if b.layer == 1)
    for r in records:
        assert r.miss_fetched == 0 and r.bytes_read == 0 and r.hits == 0 and r.host_compute_s > 0
        assert r.miss_host == 3 * 2 * 2 and r.misses == r.miss_host * 3  # tokens x layers x k; entries
    assert sum(r.miss_host_bytes for r in records) == 2 * 3 * 2 * (layer_bytes + sum(
        len(by_file[b.tensors[0]][1][0]) for b in index.blobs if b.layer == 0))
    assert len(last) == 2 * 3  # the last layer's 2 experts x 3 blobs, each the file's bytes times x
    for (b, e), y in last.items():
        kind, experts = by_file[index.blobs[b].tensors[0]]
        np.testing.assert_allclose(y, _decode(kind, experts[e]) @ rhs(COLS, b), rtol=1e-4, atol=1e-5)


def test_the_label_names_the_miss_mode():
    from workbench.measure.session.runner import session_label

    assert " miss=auto " in session_label("m.gguf", SessionConfig(turns=2, tokens=4, miss="auto")) + " "
    assert "miss" not in session_label("m.gguf", SessionConfig(turns=2, tokens=4))


def test_a_fetch_session_counts_its_misses_and_computes_nothing_on_the_host(mixed):
    cfg = SessionConfig(turns=2, tokens=3, experts_per_token=2, verify=True)
    with ExpertSession(open_index(mixed), HostDevice(), cfg) as s:
        records = list(s.turns())
        assert s.miss.host is None and s.verified_slices > 0
    assert sum(r.miss_fetched for r in records) > 0 and all(r.miss_host == 0 for r in records)
    assert all(r.host_compute_s == 0 for r in records)


def test_session_ab_over_miss_on_the_host(mixed, tmp_path):
    result = CliRunner().invoke(main, [
        "session", str(mixed), "--turns", "3", "--tokens", "3", "--experts-per-token", "2", "--compute", "device",
        "--ab", "miss=fetch", "--ab", "miss=host", "--ab", "miss=auto", "--rounds", "2",
        "--ledger", str(tmp_path / "l.sqlite"), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert not [c for c in doc["checks"] if c.startswith("FAILED")], doc["checks"]
    assert {e["metric"] for e in doc["effects"]} >= {"tok/s", "token p50 ms"}
    share = {}
    for c in doc["cells"]:
        share.setdefault(c["arm"], set()).add(c["figures"]["host share"])
        summary = c["summary"]
        assert summary["fetch_ms_per_token"] is not None and summary["device_ms_per_token"] is not None
    assert share[0] == {0.0} and share[1] == {1.0} and all(0.0 <= v <= 1.0 for v in share[2])
    auto = [c["summary"] for c in doc["cells"] if c["arm"] == 2]
    assert all(a["miss_fetch_token_ms"] is not None and a["miss_probe_tokens"] >= 0 for a in auto)


@pytest.mark.parametrize("miss", ["host", "fetch"])
def test_a_predictor_under_miss_host_stages_nothing_on_a_file_gguf_py_wrote(mixed, tmp_path, monkeypatch, miss):
    """gguf-py's mixed-dtype experts: under --miss host every layer a predictor is asked about (3 turns x
    (2 tokens x 2 layers - the turn's first)) is skipped and nothing is read ahead; under fetch the same
    layers are staged for and scored, and the landed slices verified against the file."""
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    result = CliRunner().invoke(main, [
        "session", str(mixed), "--turns", "3", "--tokens", "2", "--cache-mib", "0.01", "--experts-per-token", "2",
        "--miss", miss, "--prefetch", "previous", "--lanes", "2", "--overlap", "--verify",
        "--ledger", str(tmp_path / "l.sqlite"), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)["summary"]
    staged, skipped = (0, 9) if miss == "host" else (9, 0)
    assert (s["prefetch_layers"], s["prefetch_skipped_layers"]) == (staged, skipped), s
    assert (s["prefetch_bytes"] == 0) == (miss == "host") and (s["verified_slices"] > 0) == (miss == "fetch")


def test_bf16_experts_written_by_safetensors_match_torchs_own_widening(tmp_path):
    """A split-expert checkpoint written by the safetensors library from torch bf16 tensors: each host
    product equals torch's bf16 → f32 conversion of the same tensor times x."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(4)
    state = {f"model.layers.{layer}.mlp.experts.{e}.{part}_proj.weight":
             torch.randn((24, 40) if part != "down" else (40, 24), generator=gen).to(torch.bfloat16)
             for layer in range(2) for e in range(4) for part in ("gate", "up", "down")}
    save_file(state, str(tmp_path / "model.safetensors"))
    index = open_index(tmp_path / "model.safetensors")
    host = HostExperts(index.path, index.blobs, {t.name: t for t in index.tensors})
    try:
        assert {m.dtype for m in host.matrices} == {"BF16"} and len(index.blobs) == 6
        for b, blob in enumerate(index.blobs):
            for e in range(4):
                host.run([(b, e)])
                w = state[blob.tensors[e]].float().numpy().astype(np.float64)
                np.testing.assert_allclose(host.last[(b, e)], w @ rhs(w.shape[1], b), rtol=1e-5, atol=1e-6)
    finally:
        host.close()
