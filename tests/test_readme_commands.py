"""Every command the README and the guides in ``docs/`` show runs here — their ```sh blocks and the
`workbench …` commands in their text — in a scratch checkout (``.venv`` and ``notebooks`` linked, a
``data/`` of its own), verbatim but for tiny sizes and runs, or is marked: it needs a GPU, or it installs
or is CI itself. A command added to the README or to a guide later (a new guide too) is picked up by
:func:`readme_commands`; the test fails until it is run or marked.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from guides import ROOT, guide_files
TINY = "2MiB"  # what a README size becomes here
TINY_MOE = "8MiB"  # a MoE model's (64 experts a layer need ~7 MiB)
RUNS = "1"  # how many runs a measuring command makes here: what is checked is that it works as written

RUN = "run"
GPU = "gpu"
INSTALL = "install"
ELSEWHERE = "elsewhere"  # run by another test, named with the invocation it must contain
REFUSED = "refused"  # run here too, and refused in one line for the reason given (it needs a big file)
HELP = "help"  # a command's name in the text, not a command line: its --help runs
USAGE = "usage"  # a synopsis: every option it names must be in the command's --help

# Every command the README and the guides show, as it reads there (whitespace collapsed, trailing comment dropped).
COMMANDS: dict[str, tuple[str, str]] = {
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/workbench demo":
        (INSTALL, "the quickstart on a fresh clone: a venv, then the demo (tests/test_demo.py runs it small)"),
    "bash .ci/run": (INSTALL, "CI itself, which runs this test"),
    "workbench synth data/models/m.gguf --format gguf --layout moe --size 1GiB": (RUN, ""),
    "workbench synth data/models/8b.safetensors --format safetensors --layout dense --dtype bf16 "
    "--shape llama3-8b --size 8GiB": (REFUSED, "too small for a llama3-8b-shaped model"),
    'workbench compare data/models/m.gguf --strategy "pread evict=1" --strategy mmap --cache cold --cache warm '
    "--runs 6": (RUN, ""),
    'workbench external --file qwen3.5-9b.mq4 --device cuda --cache warm --runs 5 --cmd "./build-old/hipfire-daemon '
    '-m qwen3.5-9b.mq4" --label old --cmd "./build-new/hipfire-daemon -m qwen3.5-9b.mq4" --label new --marker '
    "'\"type\":\"loaded\"' --phase '(?P<name>weight sweep): (?P<ms>[0-9]+) ms'":
        (GPU, "an engine's two builds loading onto a GPU (--device cuda); benchmarks/bench/bench_engine_ab.py is one"),
    "workbench synth data/models/moe.gguf --format gguf --layout moe --size 256MiB --alignment 64 --experts 64":
        (RUN, ""),
    "workbench synth data/models/a3b.gguf --format gguf --layout moe --size 2GiB --experts 64 --expert-remainder 1152":
        (RUN, ""),
    "workbench synth data/models/tiny.gguf --format gguf --layout moe --size 4MiB --expert-stride odd": (RUN, ""),
    'workbench compare data/models/moe.gguf --strategy "pread granularity=expert" --strategy experts --cache warm':
        (RUN, ""),
    'workbench compare data/models/moe.gguf --strategy "odirect mode=bounce" --strategy "odirect mode=inplace"':
        (RUN, ""),
    "workbench session data/models/moe.gguf --boundary-release off": (RUN, ""),
    "workbench session data/models/moe.gguf --lanes 4 --overlap --compute sleep:20 --ab placement=bounce "
    "--ab placement=inplace": (RUN, ""),
    ".venv/bin/papermill notebooks/01_load_sweep.ipynb out.ipynb -p runs 5 -y 'strategies: [pread, mmap]'":
        (RUN, ""),
    '.venv/bin/papermill notebooks/06_engine_ab.ipynb out.ipynb -p file m.gguf -p marker "model loaded" -y '
    "'commands: [\"./engine-old -m {file}\", \"./engine-new -m {file}\"]'": (RUN, ""),
    "workbench sweep data/sweeps/warmer-grid.yaml --dry-run": (RUN, ""),
    "workbench sweep data/sweeps/warmer-grid.yaml": (RUN, ""),
    "workbench synth data/models/llama-sharded --format safetensors --layout dense --size 64MiB --shards 4":
        (RUN, ""),
    "workbench inspect data/models/llama-sharded": (RUN, ""),
    "workbench run data/models/llama-sharded --strategy ring --cache cold --cache warm --runs 5": (RUN, ""),
    "workbench compare data/models/llama-sharded/model.safetensors.index.json --strategy pread --strategy mmap "
    "--strategy ring --cache warm --runs 6": (RUN, ""),
    "workbench run data/models/llama-sharded/model-00002-of-00004.safetensors --strategy mmap --runs 5": (RUN, ""),
    "workbench synth data/models/moe-split --format gguf --layout moe --size 64MiB --shards 3": (RUN, ""),
    "workbench inspect data/models/moe-split/model-00002-of-00003.gguf": (RUN, ""),
    'workbench compare data/models/moe-split --strategy "pread granularity=expert" --strategy experts --cache warm':
        (RUN, ""),
    # the hub cache: a snapshot of links into blobs/, made in the workspace (see _hub_snapshot)
    "workbench inspect ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/*/": (RUN, ""),
    "workbench compare ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B-Instruct/snapshots/*/ --strategy mmap "
    "--strategy ring --cache cold --runs 5": (RUN, ""),
    "pip install -e '.[cuda]'": (INSTALL, "the cuda extra, on a CUDA box"),
    "python benchmarks/gpu/gpu_smoke.py --dir /tmp": (GPU, "every copy path of the cuda backend"),
    "WORKBENCH_TEST_DEVICE=cuda python -m pytest tests/test_strategies_suite.py tests/test_upload_devices.py":
        (GPU, "the suite on the cuda backend"),
    "workbench compare m.gguf --device cuda --strategy pread --strategy mmap --strategy lanes --cache warm":
        (GPU, "--device cuda"),
    # in the text
    "workbench demo --size 256MiB --runs 6": (ELSEWHERE, 'tests/test_demo.py: "demo", "--size", "4MiB", "--runs", "2"'),
    "workbench env": (RUN, ""),
    "workbench strategies": (RUN, ""),
    "workbench strategies --ranked": (RUN, ""),
    "workbench external": (HELP, ""),
    "workbench ledger export --csv out.csv --markdown out.md --campaign demo": (RUN, ""),
    "workbench ledger import-unrecorded workbench-unrecorded-….json": (RUN, ""),
    "workbench ledger list --campaign demo": (RUN, ""),
    "workbench ledger merge other-rig.sqlite": (RUN, ""),
    "workbench ledger show ID": (RUN, ""),
    'workbench ledger verdict ID kept --note "…"': (RUN, ""),
    'workbench run FILE --strategy "pread evict=1" --cache asis --runs 5': (RUN, ""),
    # docs/multi-gpu.md: a load across 2 ranks (gloo, host backend)
    "workbench synth data/models/tp.safetensors --format safetensors --size 64MiB --dtype bf16": (RUN, ""),
    "workbench compare data/models/tp.safetensors --ranks 2 --layout tp --strategy ranges --strategy shm "
    "--cache warm --runs 6": (RUN, ""),
    "workbench session MODEL": (HELP, ""),
    "workbench trace stats TRACE": (HELP, "tests/test_traces_fit.py runs it on a trace in every format"),
    "workbench trace fit TRACE --out mixtral.model.json": (HELP, "tests/test_traces_fit.py runs trace fit"),
    "workbench session MODEL --trace mixtral.model.json": (HELP, "tests/test_traces_fit.py: a session's routing "
                                                                   "from a model file"),
    "workbench trace simulate data/traces/mixtral.jsonl --cache-experts 2,4,6":
        (HELP, "tests/test_trace_simulate_cli.py runs trace simulate on a trace in every format"),
    "workbench trace simulate data/traces/mixtral.jsonl --cache-experts 4 --policy lru --policy lfu:64 --layers --json":
        (HELP, "tests/test_trace_simulate_cli.py runs --layers and --json"),
    "workbench trace simulate": (HELP, ""),
    "workbench session data/models/moe.gguf --lanes 4 --overlap --compute device --ab miss=fetch --ab miss=host "
    "--ab miss=auto": (HELP, "tests/test_expert_miss.py runs the A/B over --miss on the host backend"),
    "workbench session MODEL --trace TRACE --cache-experts N --policy P": (USAGE, ""),
    "workbench ceilings": (RUN, ""),
    "workbench ceilings --refresh": (RUN, ""),
    "workbench ledger upgrade": (RUN, ""),
    "workbench ledger export --campaign demo --figures DIR": (RUN, ""),
    "workbench synth F --format safetensors --dtype bf16 --size 1GiB": (RUN, ""),
    "workbench sweep data/sweeps/sharded.yaml": (RUN, "after the synth of data/models/llama-sharded above"),
}


def readme_commands(text: str | None = None, root: Path = ROOT) -> list[str]:
    """Every command in the README and the guides (or in ``text``), in order: per file each line of a
    ```sh block (backslash continuations joined, a trailing ``  # comment`` dropped), then each
    `workbench …` in the text."""
    if text is None:
        return list(dict.fromkeys(c for path in guide_files(root) for c in readme_commands(path.read_text())))
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s{2,}#.*$", "", line)
            if line.strip():
                out.append(" ".join(line.split()))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out += [" ".join(m.split()) for m in re.findall(r"`(workbench [^`]+)`", prose)]
    return list(dict.fromkeys(out))


def test_every_readme_command_is_run_or_marked() -> None:
    found = readme_commands()
    unmarked = [c for c in found if c not in COMMANDS]
    assert not unmarked, ("README or guide commands neither run nor marked (add each to COMMANDS in "
                          f"tests/test_readme_commands.py): {unmarked}")
    stale = [c for c in COMMANDS if c not in found]
    assert not stale, f"COMMANDS lists what neither the README nor a guide shows any longer: {stale}"
    for command, (how, why) in COMMANDS.items():
        if how == GPU:  # a GPU mark must be about a GPU
            assert re.search(r"cuda|gpu", command, re.I), command
        if how == INSTALL:
            assert "pip install" in command or ".ci/run" in command, command


def test_a_command_added_later_is_picked_up() -> None:
    added = "Try it:\n\n```sh\nworkbench synth x.gguf --format gguf \\\n    --size 9MiB   # a comment\n```\n" \
            "and `workbench ledger list\n--campaign x` too."
    assert readme_commands(added) == ["workbench synth x.gguf --format gguf --size 9MiB",
                                      "workbench ledger list --campaign x"]


def test_a_command_added_to_a_guide_later_is_picked_up(tmp_path: Path) -> None:
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    (tmp_path / "README.md").write_text("```sh\nworkbench env\n```\n")
    (tmp_path / "docs" / "a-new-guide.md").write_text("# New\n\n```sh\nworkbench strategies --json\n```\n"
                                                      "then `workbench ledger list`.\n")
    (tmp_path / "docs" / "benchmarks" / "results.md").write_text("```sh\nworkbench not-a-guide\n```\n")
    assert readme_commands(root=tmp_path) == ["workbench env", "workbench strategies --json", "workbench ledger list"]


def test_every_guide_of_the_manual_is_read() -> None:
    guides = {p.name for p in guide_files()[1:]}
    assert {"README.md", "strategies.md", "checkpoints.md", "measuring.md"} <= guides
    assert all(p.parent == ROOT / "docs" for p in guide_files()[1:])


def test_the_command_list_block_names_every_command() -> None:
    from click.testing import CliRunner

    from workbench.cli import COMMANDS as CLI, main

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The command line", 1)[1].split("```", 2)[1]
    named = [line.split()[1] for line in block.splitlines() if line.startswith("workbench ")]
    assert named == list(CLI)
    for name in named:
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0, name


def test_marked_elsewhere_is_really_run_there() -> None:
    for command, (how, why) in COMMANDS.items():
        if how == ELSEWHERE:
            path, _, invocation = why.partition(": ")
            assert invocation in (ROOT / path).read_text(), (command, why)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A scratch checkout: .venv and notebooks linked, data/ with the files the commands read (tiny), a
    ledger with a 'demo' campaign, another rig's ledger to merge and an unrecorded-results dump."""
    from workbench.io.pagecache import filesystem_type

    ws = tmp_path_factory.mktemp("readme")
    if filesystem_type(ws) in ("tmpfs", "ramfs"):  # cold would be unreachable: use the checkout's disk
        ws = ROOT / "test-artifacts" / f"readme-commands-{os.getpid()}"
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir(parents=True)
    (ws / ".venv").symlink_to(sys.prefix)
    (ws / "notebooks").symlink_to(ROOT / "notebooks")
    data = ws / "data"
    (data / "sweeps").mkdir(parents=True)
    # the sweep file as shipped, its runs cut and each list of its parameter grid to its first value
    sweep = (ROOT / "data" / "sweeps" / "warmer-grid.yaml").read_text()
    sweep = re.sub(r"(?m)^(\s*runs:) \d+", rf"\1 {RUNS}", sweep)
    sweep = re.sub(r"(threads|chunk_mib): \[(\w+)[^]]*\]", r"\1: [\2]", sweep)
    (data / "sweeps" / "warmer-grid.yaml").write_text(sweep)
    sharded = (ROOT / "data" / "sweeps" / "sharded.yaml").read_text()
    (data / "sweeps" / "sharded.yaml").write_text(re.sub(r"(?m)^(\s*runs:) \d+", rf"\1 {RUNS}", sharded))
    env = {**os.environ, "WORKBENCH_DATA": str(data), "WORKBENCH_LOCK_DIR": str(ws / "locks"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("WORKBENCH_LEDGER", None)
    for name in ("engine-old", "engine-new"):  # the two builds the notebook 06 example names
        engine = ws / name
        engine.write_text('#!/bin/sh\n# -m MODEL: read it whole, then say so\ncat "$2" > /dev/null\necho "model loaded"\n')
        engine.chmod(0o755)
    from workbench.formats.synth import write_synthetic

    write_synthetic(ws / "m.gguf", format="gguf", layout="dense", size=2 << 20)
    write_synthetic(data / "models" / "demo-dense-32MiB.gguf", format="gguf", layout="dense", size=2 << 20)
    _hub_snapshot(ws / "hub" / "models--Qwen--Qwen2.5-7B-Instruct", ws / "checkpoint")
    _seed_ledgers(ws, env)
    yield ws, env
    if ws.is_relative_to(ROOT):
        shutil.rmtree(ws, ignore_errors=True)


def _hub_snapshot(repo: Path, scratch: Path) -> None:
    """A sharded checkpoint laid out as the Hugging Face cache keeps one: blobs named by their sha256,
    and ``snapshots/<revision>/`` holding relative links to them (``../../blobs/<sha>``)."""
    import hashlib

    from workbench.formats.synth import write_synthetic

    write_synthetic(scratch, format="safetensors", layout="dense", size=2 << 20, shards=3, seed=3)
    snapshot = repo / "snapshots" / hashlib.sha1(b"revision").hexdigest()
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for f in sorted(scratch.iterdir()):
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        f.rename(repo / "blobs" / sha)
        (snapshot / f.name).symlink_to(f"../../blobs/{sha}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(snapshot.name)


def _seed_ledgers(ws: Path, env: dict[str, str]) -> None:
    """A 'demo' campaign in the default ledger, another rig's ledger, and a dump of unrecorded results."""
    for ledger, campaign, host in (("", "demo", ""), (str(ws / "other-rig.sqlite"), "other", "other-rig")):
        sub = {**env, "WORKBENCH_HOST": host or env.get("WORKBENCH_HOST", "")}
        args = ["workbench", "run", str(ws / "m.gguf"), "--strategy", "pread", "--runs", "1", "--cache", "asis",
                "--campaign", campaign] + (["--ledger", ledger] if ledger else [])
        subprocess.run(args, cwd=ws, env={k: v for k, v in sub.items() if v}, check=True, capture_output=True)
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure
    from workbench.measure.run.unrecorded import save_unrecorded, unrecorded_payload

    with Ledger(ws / "scratch.sqlite") as scratch:
        results = measure([RunConfig(str(ws / "m.gguf"), "mmap")], runs=1, cache="asis", ledger=scratch,
                          campaign="cut", lock_dir=ws / "locks")
    save_unrecorded(ws / "scratch.sqlite", unrecorded_payload(ws / "scratch.sqlite", "disk full", results,
                                                              campaign="cut"))


def _placeholders(ws: Path) -> dict[str, str]:
    from workbench.ledger import Ledger

    with Ledger(ws / "data" / "ledger.sqlite", create=False) as led:
        attempt = led.attempts("demo")["id"].iloc[0]
    (dump,) = ws.glob("workbench-unrecorded-*.json")
    return {r"~/\.cache/huggingface/hub": str(ws / "hub"), r"\bID\b": attempt, r"(?<= )FILE\b": "m.gguf",
            r"(?<= )F(?= )": "data/models/f.safetensors", r"workbench-unrecorded-….json": dump.name,
            r"(?<= )DIR\b": "figures-out"}


def tiny(command: str, ws: Path) -> str:
    """The command as it runs here: sizes, run counts, a session's turns and A/B rounds cut (a measuring
    command that names none gets one), placeholders filled."""
    size = TINY_MOE if "--layout moe" in command else TINY
    command = re.sub(r"--size \d+(?:\.\d+)?[KMGT]i?B", f"--size {size}", command)
    command = re.sub(r"(--runs|-p runs) \d+", rf"\1 {RUNS}", command)
    if re.match(r"workbench ceilings\b", command) and "--size" not in command and "--refresh" not in command:
        command += f" --size {TINY}"  # refreshed at the size recorded
    if re.match(r"workbench (run|compare) ", command) and "--runs" not in command:
        command += f" --runs {RUNS}"
    if re.match(r"workbench session \S", command) and "--help" not in command:  # a few short turns, one A/B round
        command = re.sub(r"--rounds \d+", "--rounds 1", command)
        cuts = (("--turns", 2), ("--tokens", 4)) + ((("--rounds", 1),) if "--ab" in command else ())
        command += "".join(f" {opt} {n}" for opt, n in cuts if opt not in command)
    if " papermill " in f" {command.replace('/', ' ')}" and "-p runs" not in command:
        command += f" -p runs {RUNS}"
    for pattern, value in _placeholders(ws).items():
        command = re.sub(pattern, value, command)
    return command


def _shell(command: str, ws: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=ws, env=env, capture_output=True, text=True, timeout=500)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", [c for c, (how, _) in COMMANDS.items() if how in (RUN, REFUSED, HELP, USAGE)])
def test_readme_command_runs(command: str, workspace: tuple[Path, dict[str, str]]) -> None:
    ws, env = workspace
    how, why = COMMANDS[command]
    if how == HELP:
        command = f"{command} --help"
    if how == USAGE:
        words = command.split()
        help_text = _shell(f"{words[0]} {words[1]} --help", ws, env).stdout
        options = set(re.findall(r"--[a-z][a-z-]+", command))
        assert options and all(o in help_text for o in options), sorted(o for o in options if o not in help_text)
        return
    proc = _shell(tiny(command, ws), ws, env)
    output = f"$ {tiny(command, ws)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if how == REFUSED:
        assert proc.returncode == 2 and why in proc.stderr and proc.stderr.count("\n") == 1, output
    else:
        assert proc.returncode == 0, output
