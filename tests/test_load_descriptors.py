"""A set of more files than the descriptor limit loads, or says so in one line (issue 24 §2).

``ring`` on 10,000 real shards ran 168 s into EMFILE: each of its 16 readers kept every file it had
read open, besides the load's own descriptor per file. Here RLIMIT_NOFILE is lowered in a child process
(instead of writing 10,000 files) below what a set of 256 shards written by safetensors needs that
way, and every strategy of the workbench's own must load it, verified; with the hard limit
itself too low, the runner's preflight and a load say so in one line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from workbench.strategies import STRATEGIES, strategy_kind

SHARDS = 256
CHILD = textwrap.dedent("""
    import json, resource, sys
    soft, hard = (int(x) for x in sys.argv[2:4])
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    from workbench.errors import WorkbenchError
    from workbench.formats import open_index
    from workbench.measure.run.verify import verify_placements
    from workbench.strategies import get_strategy
    from workbench.upload import open_device
    index, out = open_index(sys.argv[1]), {}
    for spec in sys.argv[4:]:
        name, _, param = spec.partition(" ")
        strategy = get_strategy(name).from_strings(dict([param.split("=")]) if param else {})
        if not strategy.available() or not strategy.fits(index, "host"):
            continue
        try:
            with open_device("host") as device:
                result = strategy.load(index, device)
                report = verify_placements(index, device, result.placements)
            out[spec] = "ok" if report.ok and report.checked == len(index) else report.detail
        except (WorkbenchError, OSError) as exc:
            out[spec] = f"{type(exc).__name__}: {exc}"
    out["soft"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(json.dumps(out))
""")
OWN = [n for n in STRATEGIES if strategy_kind(n) == "strategy"]
EVICTING = ["ring evict=1", "experts evict=1", "lanes evict=1"]  # a descriptor per file for eviction too


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """A numbered set of SHARDS files written by safetensors' own writer, a few small tensors each."""
    import numpy as np
    from safetensors.numpy import save_file

    directory = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(3)
    for i in range(SHARDS):
        tensors = {f"layers.{i}.{k}": rng.integers(0, 255, (7 + k, 3), dtype=np.uint8) for k in range(3)}
        save_file(tensors, str(directory / f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"))
    return directory


def run_child(model, soft: int, hard: int, names: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(model), str(soft), str(hard), *names],
                          capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_every_strategy_loads_a_set_its_readers_would_open_past_the_limit(many_shards):
    """soft = hard = 450: the load's one descriptor per file fits (256 + 128 spare), with its readers'
    own descriptor of every file they read besides (2 × 256) it does not."""
    out = run_child(many_shards, 450, 450, OWN + EVICTING)
    failed = {k: v for k, v in out.items() if k != "soft" and v != "ok"}
    assert not failed and len(out) > 8, failed


def test_a_load_raises_its_soft_limit_to_the_hard_one(many_shards):
    out = run_child(many_shards, 200, 1024, ["pread", "mmap"])
    assert out == {"pread": "ok", "mmap": "ok", "soft": 1024}, out


def test_a_hard_limit_below_the_set_is_one_line_before_anything_is_opened(many_shards):
    out = run_child(many_shards, 200, 200, ["pread"])
    line = out["pread"]
    assert line.startswith("FormatError: ") and "\n" not in line, line
    assert f"{SHARDS} files need" in line and "(soft 200, hard 200)" in line, line


def test_the_runner_refuses_such_a_set_in_its_preflight(many_shards, tmp_path):
    ledger = tmp_path / "l.sqlite"
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)); "
            "from workbench.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", code, "run", str(many_shards), "--strategy", "pread", "--runs", "1",
                           "--cache", "asis", "--ledger", str(ledger)],
                          capture_output=True, text=True, timeout=120, env=os.environ)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "files need" in lines[0] and "hard 200" in lines[0], proc.stderr
    assert not ledger.exists()
