"""Loads across several ranks (issue 36) on the host backend with gloo: every ranked strategy under both
layouts on files written by foreign writers (safetensors' numpy writer, gguf-py), each rank's device
bytes checked against the layout rule restated here with numpy slicing; odd shapes (a vocabulary vLLM
pads, 5 experts over 2 and 3 ranks); a rank that dies or hangs fails the run in one line, no rank left."""
from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np
import pytest

from foreign_writers import write_gguf_moe
from workbench.errors import ParamError, WorkerFailed
from workbench.formats import open_index
from workbench.records import RunConfig

pytest.importorskip("torch.distributed")

HIDDEN, FF, VOCAB, EXPERTS = 48, 96, 100, 5
TP = {"q_proj": "col", "k_proj": "col", "v_proj": "col", "o_proj": "row", "gate_proj": "col", "up_proj": "col",
      "down_proj": "row"}


def _write_llama(path):
    """A 1-layer Llama-named checkpoint by safetensors' own writer: vocab 100 (not a multiple of 64)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "lm_head.weight": (VOCAB, HIDDEN),
              "model.norm.weight": (HIDDEN,), "model.layers.0.input_layernorm.weight": (HIDDEN,)}
    for name in TP:
        part = "mlp" if name.endswith(("gate_proj", "up_proj", "down_proj")) else "self_attn"
        shapes[f"model.layers.0.{part}.{name}.weight"] = (HIDDEN, FF) if name == "down_proj" else (
            (FF, HIDDEN) if part == "mlp" else (HIDDEN, HIDDEN))
    tensors = {n: rng.standard_normal(s).astype(np.float32 if len(s) == 1 else np.float16) for n, s in shapes.items()}
    save_file(tensors, str(path))
    return tensors


def _write_moe(path):
    """A gguf-py MoE: 5 stacked F16 experts per projection, F32 norm and router, a token embedding."""
    rng = np.random.default_rng(11)
    tensors = {"token_embd.weight": rng.standard_normal((64, 32)).astype(np.float16),
               "blk.0.attn_norm.weight": rng.standard_normal(32).astype(np.float32),
               "blk.0.ffn_gate_inp.weight": rng.standard_normal((EXPERTS, 32)).astype(np.float32)}
    for part, shape in (("gate", (EXPERTS, 16, 32)), ("up", (EXPERTS, 16, 32)), ("down", (EXPERTS, 32, 16))):
        tensors[f"blk.0.ffn_{part}_exps.weight"] = rng.standard_normal(shape).astype(np.float16)

    def add(writer):
        for name, array in tensors.items():
            writer.add_tensor(name, array)

    write_gguf_moe(path, add, blocks=1, experts=EXPERTS, used=2)
    return tensors


def _tp_part(name: str, array: np.ndarray, rank: int, world: int) -> np.ndarray:
    """vLLM's rule restated: column on dim 0, row on dim 1, vocab padded to 64 then split, else whole."""
    short = name.split(".")[-2]
    if short in ("embed_tokens", "lm_head"):
        per = -(-(-(-len(array) // 64) * 64) // world)
        out = np.zeros((per,) + array.shape[1:], dtype=array.dtype)
        got = array[rank * per:(rank + 1) * per]
        out[:len(got)] = got
        return out
    rule = TP.get(short)
    if rule == "col":
        n = array.shape[0] // world
        return array[rank * n:(rank + 1) * n]
    if rule == "row":
        n = array.shape[1] // world
        return array[:, rank * n:(rank + 1) * n]
    return array


def _ep_part(name: str, array: np.ndarray, rank: int, world: int) -> np.ndarray | None:
    """vLLM's expert map restated: E // W each, the first E % W ranks one more."""
    if "_exps" not in name:
        return array
    sizes = [EXPERTS // world + (1 if r < EXPERTS % world else 0) for r in range(world)]
    lo = sum(sizes[:rank])
    return array[lo:lo + sizes[rank]] if sizes[rank] else None


def _expected_digest(path, tensors, layout, rank, world) -> str:
    digest = hashlib.sha256()
    for t in open_index(str(path)).sorted_by_offset():
        part = (_tp_part if layout == "tp" else _ep_part)(t.name, tensors[t.name], rank, world)
        if part is not None:
            digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    llama, moe = root / "llama.safetensors", root / "moe.gguf"
    return {"tp": (llama, _write_llama(llama)), "ep": (moe, _write_moe(moe))}


# every strategy under both layouts; uneven splits at 3 ranks (vocab padding: ranges and scatter; 2/2/1 experts: shm)
CASES = [("whole", "tp", 2), ("ranges upload=pinned threads=2 staging_mib=1", "tp", 3), ("shm", "tp", 2),
         ("scatter", "tp", 3), ("whole", "ep", 2), ("ranges", "ep", 2), ("shm", "ep", 3), ("scatter", "ep", 2)]


@pytest.mark.parametrize("strategy,layout,world", CASES)
def test_every_rank_holds_its_slices_byte_for_byte(models, strategy, layout, world):
    from workbench.measure.ranks.runner import run_ranks

    path, tensors = models[layout]
    strategy, *words = strategy.split()
    params = {"ranks": str(world), "layout": layout, **dict(w.split("=") for w in words)}
    out = run_ranks(RunConfig(file=str(path), strategy=strategy, params=params), timeout_s=120)
    ranks = out.report.ranks
    assert [r.rank for r in ranks.ranks] == list(range(world)) and out.verified is True
    for r in ranks.ranks:
        assert r.verified, r.verify_detail
        assert r.digest == _expected_digest(path, tensors, layout, r.rank, world), f"rank {r.rank}"
    # one clock: the window spans every rank's, and is no longer than first start → last end
    assert out.load_s == pytest.approx(max(r.end for r in ranks.ranks) - min(r.start for r in ranks.ranks))
    assert out.load_s >= max(r.load_s for r in ranks.ranks)
    assert out.bytes == sum(r.bytes_held for r in ranks.ranks)
    readers = [r for r in ranks.ranks if r.bytes_read]
    if strategy in ("shm", "scatter"):  # one reader; scatter's bytes go over the process group
        assert [r.rank for r in readers] == [0]
    if strategy == "scatter":
        assert all(r.bytes_interconnect == r.bytes_held for r in ranks.ranks[1:])
    if strategy == "ranges":
        assert all(r.bytes_read < os.path.getsize(path) for r in ranks.ranks)
    assert not [p for p in os.listdir("/dev/shm") if p.startswith("workbench-ranks-")]


def test_a_dim_the_ranks_do_not_divide_is_refused(models):
    from workbench.measure.ranks.runner import preflight_ranks

    path, _ = models["tp"]
    with pytest.raises(ParamError, match=r"\.weight \(48, 96\): dim 1 \(96\) does not divide by 5 ranks \(row-parallel"):
        preflight_ranks([RunConfig(file=str(path), strategy="whole", params={"ranks": "5", "layout": "tp"})])
    with pytest.raises(ParamError, match="no expert tensors"):
        preflight_ranks([RunConfig(file=str(path), strategy="whole", params={"ranks": "2", "layout": "ep"})])


def _our_ranks() -> list[int]:
    """Rank processes this test process started that still exist (zombies included)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"workbench.measure.ranks.worker" in cmd:
            found.append(int(pid))
    return found


def test_a_killed_rank_fails_the_run_in_one_line_and_the_rest_are_killed(models, monkeypatch):
    from workbench.measure.ranks.runner import run_ranks

    monkeypatch.setenv("WORKBENCH_TEST_FAULT", json.dumps({"rank1": "sigkill", "rank0": "hang"}))
    path, _ = models["tp"]
    t0 = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"^rank 1 of 2 killed by SIGKILL: .*the other ranks were killed") as err:
        run_ranks(RunConfig(file=str(path), strategy="scatter", params={"ranks": "2", "layout": "tp"}), timeout_s=45)
    assert time.monotonic() - t0 < 40  # rank 0 hangs: it was killed, not waited for
    assert "\n" not in str(err.value) and not _our_ranks()


def test_a_hung_rank_is_killed_at_the_timeout(models, monkeypatch):
    from workbench.measure.ranks.runner import run_ranks

    monkeypatch.setenv("WORKBENCH_TEST_FAULT", json.dumps({"rank1": "hang"}))
    path, _ = models["ep"]
    t0 = time.monotonic()
    # (under load the timeout may come before rank 0 is done too: then both are named)
    with pytest.raises(WorkerFailed, match=r"^ranks timed out after 5 s \(killed\); still running: ranks? (0, )?1$"):
        run_ranks(RunConfig(file=str(path), strategy="scatter", params={"ranks": "2", "layout": "ep"}), timeout_s=5)
    assert time.monotonic() - t0 < 30 and not _our_ranks()


def test_the_cli_records_every_rank_and_exports_them(models, tmp_path):
    """`workbench run --ranks`: the attempt in the ledger, one row per rank in ranks.csv, the figure."""
    import pandas as pd
    from click.testing import CliRunner

    from one_line import one_error_line
    from workbench.cli import main
    from workbench.ledger import Ledger
    from workbench.ledger.figures.ranks import rank_windows
    from workbench.ledger.ranks import ranks_frame
    from workbench.ledger.report import all_figures

    path, _ = models["ep"]
    ledger = tmp_path / "l.sqlite"
    result = CliRunner().invoke(main, ["run", str(path), "--ranks", "2", "--layout", "ep", "--strategy", "ranges",
                                       "--runs", "1", "--cache", "asis", "--ledger", str(ledger)])
    assert result.exit_code == 0, result.output
    assert "ranges layout=ep ranks=2" in result.output and "2 ranks (ep): slowest rank" in result.output
    refused = CliRunner().invoke(main, ["run", str(models["tp"][0]), "--ranks", "5", "--strategy", "whole",
                                        "--ledger", str(ledger)])
    one_error_line(refused, "does not divide by 5 ranks")
    with Ledger(str(ledger)) as store:
        assert len(store.attempts()) == 1  # the refusal recorded nothing
        frame = ranks_frame(store)
        out = CliRunner().invoke(main, ["ledger", "export", "--csv", str(tmp_path / "a.csv"),
                                        "--ledger", str(ledger)])
    assert out.exit_code == 0, out.output
    assert list(frame["rank"]) == [0, 1] and frame["verified"].all() and frame["slowest"].sum() == 1
    assert (frame["bytes_read"] < os.path.getsize(path)).all()
    csv = pd.read_csv(tmp_path / "a_ranks.csv")
    assert list(csv["rank"]) == [0, 1] and set(csv["layout"]) == {"ep"}
    assert len(rank_windows(frame, {}).data) == 2
    with Ledger(str(ledger)) as store:
        assert "rank_windows" in all_figures(store, "default")


def test_pinned_ranges_pieces_cover_a_slice_in_order():
    from workbench.strategies.ranked.ranges import _chunks

    ranges = ((0, 5), (10, 7), (100, 3), (200, 4))
    pieces = _chunks(3, "f", ranges, 4)
    assert all(i == 3 and path == "f" and sum(n for _, n in parts) <= 4 for i, _, path, parts in pieces)
    assert [dst for _, dst, _, _ in pieces] == list(range(0, 19, 4))  # the buffer filled back to back
    flat = [b for _, _, _, parts in pieces for off, n in parts for b in range(off, off + n)]
    assert flat == [b for off, n in ranges for b in range(off, off + n)]


def test_the_notebook_measures_ranks_with_the_clis_table(tmp_path, monkeypatch):
    """notebooks/08_ranks.ipynb under papermill: the CLI's attempts table and spread line, each rank's window."""
    import papermill

    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("WORKBENCH_DATA", str(tmp_path / "data"))
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "notebooks", "08_ranks.ipynb")
    out = tmp_path / "08.ipynb"
    papermill.execute_notebook(root, str(out), parameters={"ranks": "2", "strategies": "ranges", "runs": 1,
                                                           "size": "2MiB", "cache": "asis",
                                                           "ledger_path": str(tmp_path / "l.sqlite")},
                               kernel_name="python3", progress_bar=False)
    nb = json.loads(out.read_text())
    got = [o for c in nb["cells"] for o in c.get("outputs", [])]
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in got)
    assert "ranges layout=tp ranks=2" in html and "2 ranks (tp): slowest rank" in html
    titles = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for o in got
              if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert any(t.startswith("Each rank's load") for t in titles)
