"""Evidence is about the model's own bytes (issue 23 §2): an engine that reads as many bytes of
/dev/zero or of a copy of the model gets no evidence, no GB/s and exit 4 (``--time-only`` accepts it);
real loaders — safetensors' ``safe_open`` over every tensor of a set huggingface_hub wrote, streaming
shard by shard, and transformers' ``from_pretrained`` — are credited cold and warm."""
from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.measure.engine.target import ReadTarget
from workbench.measure.engine.external import time_external

ENGINES = Path(__file__).resolve().parent / "engines"
MODEL_BYTES = 4 << 20


@pytest.fixture
def env(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path


def _engine(name: str, *args: object) -> str:
    return shlex.join([sys.executable, str(ENGINES / name), *map(str, args)])


def _gguf(env: Path) -> Path:
    from workbench.formats.synth import write_synthetic

    write_synthetic(env / "m.gguf", format="gguf", layout="dense", size=MODEL_BYTES)
    return env / "m.gguf"


def _hub_set(directory: Path) -> Path:
    """4 MiB of bf16 in 4 shards, written by huggingface_hub's save_torch_state_dict."""
    torch = pytest.importorskip("torch")
    from huggingface_hub import save_torch_state_dict

    g = torch.Generator().manual_seed(0)
    state = {f"layers.{i}.weight": torch.randn(512, 512, generator=g).to(torch.bfloat16) for i in range(8)}
    directory.mkdir()
    save_torch_state_dict(state, str(directory), max_shard_size=1_100_000)
    assert len(list(directory.glob("*.safetensors"))) == 4
    return directory


def _cold(model: ReadTarget) -> None:
    from workbench.errors import CacheStateError
    from workbench.io.pagecache import prepare

    try:
        for path in model.paths:
            prepare(path, "cold")
    except CacheStateError as exc:
        pytest.skip(f"cold unreachable here: {exc}")


def test_an_engine_reading_dev_zero_for_the_models_size_is_time_only_and_exits_4(env: Path) -> None:
    model = _gguf(env)
    size = model.stat().st_size
    args = ["external", "--file", str(model), "--cmd", _engine("impostor_engine.py", "/dev/zero", size),
            "--marker", "model ready", "--runs", "2", "--cache", "warm", "--device", "host", "--json"]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 4, out.output  # before: its read calls (rchar) were evidence, 0 and a GB/s
    assert "NO EVIDENCE: 2/2 finished runs show no evidence the engine read m.gguf" in out.stderr
    assert "--time-only accepts that" in out.stderr and out.stderr.strip().endswith("exit 4")
    data = json.loads(out.stdout)
    assert data["gbps"] is None and data["ceiling_fraction"] is None
    for run in data["runs"]:
        evidence = run["external"]["evidence"]
        assert run["bytes"] == 0 and evidence["basis"] == "" and evidence["rchar"] >= size
        assert evidence["seen_bytes"] == 0 and evidence["files_held"] == 0
        assert run["engaged"][0].endswith("it never opened, read or mapped it): time only")
        assert evidence["grade"] == "none" and evidence["source"] == "events"
    accepted = CliRunner().invoke(main, [*args, "--time-only"], catch_exceptions=False)
    assert accepted.exit_code == 0, accepted.output  # time only, on purpose
    assert json.loads(accepted.stdout)["gbps"] is None and "NO EVIDENCE" not in accepted.stderr


def test_an_engine_reading_a_copy_of_the_model_is_no_evidence_cold_or_warm(env: Path) -> None:
    model = _gguf(env)
    copy = env / "copy-of-m.gguf"  # the same size and the same bytes, another inode
    shutil.copyfile(model, copy)
    target = ReadTarget.of(str(model))
    cmd = _engine("impostor_engine.py", copy, model.stat().st_size)
    for state in ("warm", "cold"):
        if state == "cold":
            _cold(target)
        out = time_external(cmd, "model ready", timeout_s=60, nbytes=123, model=target)
        evidence = out.report.external.evidence
        assert out.error is None and not evidence.ok and out.bytes == 0, (state, evidence)
        assert evidence.seen_bytes == 0 and evidence.resident_after - evidence.resident_before < 1 << 20
        assert "no evidence the engine read m.gguf" in out.engaged[0]


@pytest.mark.parametrize("state", ["cold", "warm"])
def test_safe_open_over_every_tensor_of_a_hub_sharded_set_is_credited_cold_and_warm(env: Path, state: str) -> None:
    directory = _hub_set(env / "hub")
    target = ReadTarget.of(str(directory))
    assert len(target.paths) == 4 and target.nbytes == MODEL_BYTES
    if state == "cold":
        _cold(target)
    else:
        for path in target.paths:
            Path(path).read_bytes()
        assert target.resident_bytes() >= sum(target.sizes) - 4096 * len(target.paths)  # really warm
    out = time_external(_engine("safe_open_engine.py", directory), "model ready", timeout_s=120,
                        nbytes=MODEL_BYTES, model=target)
    evidence = out.report.external.evidence
    assert out.error is None and evidence.ok and out.bytes == MODEL_BYTES, evidence
    assert evidence.files_held == 4 and evidence.seen_bytes >= 0.9 * MODEL_BYTES
    if state == "warm":  # nothing was fetched: its own touches of the mappings show it
        assert evidence.resident_after == evidence.resident_before and evidence.grade == "mapping-touched"


STREAM = """import mmap, os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY); m = mmap.mmap(fd, 0, prot=mmap.PROT_READ); os.close(fd)
    sum(m[i] for i in range(0, len(m), 4096))
    print('read', path, flush=True); sys.stdin.readline()
    m.close()
print('model ready', flush=True); sys.stdin.readline()
"""


def test_shards_mapped_read_and_dropped_one_by_one_are_credited_from_the_event_record(env: Path) -> None:
    # The warm transformers load on the H200: shards mapped, read and unmapped in turn, never all at
    # once. The event record credits each shard's touches whenever they happened; the samples (one
    # while each shard is mapped: the test paces the loader) see at most a quarter of the set at once,
    # and resident pages cannot tell touched from populated: the sampled fallback says mapped-only.
    import subprocess
    import time

    from workbench.measure.engine.evidence import judge
    from workbench.measure.engine.sampler import TreeSampler

    directory = _hub_set(env / "hub")
    target = ReadTarget.of(str(directory))
    sampler = TreeSampler.at_spawn(target)  # before the spawn: the event record follows what it starts
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", STREAM, *target.paths], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        sampler.root, most_at_once = proc.pid, 0
        for _ in target.paths:
            assert proc.stdout.readline().startswith("read")
            sampler.sample()
            most_at_once = max(most_at_once, sum(sampler._now))
            prior = time.monotonic()  # its last line before the ready line was read by now
            proc.stdin.write("\n")
            proc.stdin.flush()
        assert proc.stdout.readline().startswith("model ready")
        sampled = judge(sampler, target.resident())
        evidence = sampler.finish(began, time.monotonic(), prior)
    finally:
        proc.kill()
        proc.wait()
        sampler.close()
    assert most_at_once <= max(target.sizes) + 4096 < 0.9 * MODEL_BYTES  # no one sample shows the set
    assert sampled.grade == "mapped-only" and not sampled.ok, sampled
    assert evidence.grade == "mapping-touched" and evidence.touched_bytes >= 0.99 * MODEL_BYTES, evidence
    assert evidence.opens >= 4 and evidence.source == "events"  # inotify saw every shard opened


def test_safe_open_keeping_its_weights_is_credited_through_the_cli(env: Path) -> None:
    directory = _hub_set(env / "hub")
    out = CliRunner().invoke(main, ["external", "--file", str(directory), "--cmd",
                                    _engine("safe_open_engine.py", directory), "--marker", "model ready",
                                    "--runs", "2", "--cache", "warm", "--device", "host", "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["gbps"] and all(r["external"]["evidence"]["basis"].startswith("4.00 MiB touched through its mappings")
                                for r in data["runs"])


def test_transformers_from_pretrained_is_credited_cold_and_warm(env: Path) -> None:
    # transformers 5 keeps a checkpoint's weights in the shards' mappings (zero-copy on the CPU) and
    # reads them on first use: the engine's warm-up pass before its ready line is that first use
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (not in CI)")
    import torch

    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(env / "llama", max_shard_size="1MB")
    target = ReadTarget.of(str(env / "llama"))
    assert len(target.paths) > 2
    cmd = _engine("transformers_engine.py", env / "llama", "--dtype", "bfloat16", "--warmup")
    for state in ("cold", "warm"):
        if state == "cold":
            _cold(target)
        else:
            assert target.resident_bytes() >= sum(target.sizes) - 4096 * len(target.paths)  # warm from the cold run
        out = time_external(cmd, "model ready", timeout_s=300, nbytes=1, model=target)
        evidence = out.report.external.evidence
        assert out.error is None and evidence.ok and out.bytes == 1, (state, evidence)


def test_exit_4_is_documented_in_the_help_and_the_readme() -> None:
    text = " ".join(CliRunner().invoke(main, ["external", "--help"], terminal_width=200).output.split())
    assert "4 every run finished but some show no evidence the engine read the model" in text and "--time-only" in text
    from guides import section as guide_section

    _, table = guide_section("Exit status")
    assert "| `4` | `external` only" in table and "--time-only" in table
