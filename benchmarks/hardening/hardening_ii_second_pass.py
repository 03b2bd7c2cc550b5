"""Issue 19's second adversarial pass: each break it found, as an example, measured. Run with
PYTHONPATH=<a checkout> to measure that checkout's code (``PYTHONPATH=$PWD python
benchmarks/hardening/hardening_ii_second_pass.py`` here, and with a copy of main before the fixes for "before").
One JSON line per example (docs/hardening/README.md, "Second adversarial pass")."""
import hashlib, json, os, stat, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(tempfile.mkdtemp(prefix="pass2-"))
PY = sys.executable
ENV = {**os.environ, "WORKBENCH_LOCK_DIR": str(ROOT / "locks"), "WORKBENCH_DATA": str(ROOT / "data")}
TESTS = Path(__file__).resolve().parents[2] / "tests"


def wb(*args, env=None, timeout=120):
    t0 = time.monotonic()
    try:
        p = subprocess.run([PY, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                           env={**ENV, **(env or {})}, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "timeout", round(time.monotonic() - t0, 1), []
    return p.returncode, round(time.monotonic() - t0, 1), (p.stdout + p.stderr).strip().splitlines()[-1:]


def py(code, *args, env=None):
    pre = f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    p = subprocess.run([PY, "-c", pre + code, *map(str, args)], capture_output=True, text=True, env={**ENV, **(env or {})})
    return ((p.stdout.strip() or p.stderr.strip()).splitlines() or [""])[-1]


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def lock_dir_swapped():
    """A parent anyone may write into; between mkdir and chmod the new lock directory becomes a link to a root dir."""
    etc, shared = ROOT / "etc", ROOT / "shared"
    etc.mkdir(mode=0o755); shared.mkdir(); os.chmod(shared, 0o777)
    code = """import os, pathlib
from workbench.measure.lock.device import DeviceLock
shared, etc = pathlib.Path(sys.argv[1]), sys.argv[2]
real = os.mkdir
def swap(path, mode=0o777, *, dir_fd=None):
    real(path, mode, dir_fd=dir_fd)
    if os.fspath(path).endswith('locks'):
        os.rename(shared / 'locks', shared / 'moved'); os.symlink(etc, shared / 'locks')
os.mkdir = swap
try:
    DeviceLock('host', shared / 'locks').acquire(); print('acquired')
except Exception as e: print(type(e).__name__)"""
    return {"result": py(code, shared, etc), "root_dir_mode": oct(stat.S_IMODE(os.stat(etc).st_mode))}


def fill(path, host="rig-a"):
    py("from ledger_helpers import fill_ledger; fill_ledger(sys.argv[1], host=sys.argv[2])", path, host)


def merge_basic_time():
    local, other = ROOT / "t-local.sqlite", ROOT / "t-other.sqlite"
    fill(local); fill(other, "rig-b")
    import sqlite3
    c = sqlite3.connect(other); c.execute("UPDATE attempts SET created = '20261201T000000'"); c.commit(); c.close()
    rc, _, tail = wb("ledger", "--ledger", local, "merge", other)
    order = py("from workbench.ledger import Ledger\nprint(list(Ledger(sys.argv[1], readonly=True).attempts()['host']))", local)
    return {"exit": rc, "hosts_oldest_first": order, "said": tail}


def merge_own_name():
    local, other = ROOT / "h-local.sqlite", ROOT / "h-other.sqlite"
    fill(local); fill(other, "rig-b")
    own = py("from workbench.settings.defaults import host_id; print(host_id())", env={"WORKBENCH_HOST": ""})
    py("from workbench.ledger import Ledger\nLedger(sys.argv[1]).record_ceiling('disk_cold_1t', 99.0, {}, host=sys.argv[2])", other, own)
    rc, _, tail = wb("ledger", "--ledger", local, "merge", other, env={"WORKBENCH_HOST": "rig-a"})
    after = py("from workbench.ledger import Ledger\nfrom workbench.measure.ceilings.bounds import host_ceilings\n"
               "print(host_ceilings(Ledger(sys.argv[1])).get('disk_cold_1t'))", local, env={"WORKBENCH_HOST": ""})
    return {"exit": rc, "ceiling_here_after_unset": after}


def figures_onto_ledger():
    l, figs = ROOT / "f.sqlite", ROOT / "figs"
    fill(l); figs.mkdir(); os.symlink(l, figs / "figures.html")
    rc, _, tail = wb("ledger", "--ledger", l, "export", "--figures", figs, "--campaign", "c")
    return {"exit": rc, "ledger_still_sqlite": l.read_bytes()[:15] == b"SQLite format 3", "said": tail}


def synth_over_index():
    out = ROOT / "set"
    wb("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "2")
    before = sha(out / "model.safetensors.index.json")
    rc, _, tail = wb("synth", out, "--format", "safetensors", "--size", "256KiB", "--shards", "3")
    return {"exit": rc, "index_changed": sha(out / "model.safetensors.index.json") != before, "said": tail}


def sweep_yaml():
    inner = "&l0 [" + ", ".join(["m.gguf"] * 10) + "]"
    for i in range(1, 10):
        inner = f"&l{i} [{inner}, " + ", ".join([f"*l{i - 1}"] * 9) + "]"
    bomb, key = ROOT / "bomb.yaml", ROOT / "key.yaml"
    bomb.write_text(f"notebook: 06_engine_ab\ncampaign: c\nparameters:\n  binaries: {inner}\n")
    key.write_text("notebook: 01_load_sweep\ncampaign: c\nparameters:\n  1: x\n")
    b = wb("sweep", bomb, "--dry-run", timeout=60)
    k = wb("sweep", key, "--dry-run")
    return {"alias_bomb": {"exit": b[0], "s": b[1]}, "int_key": {"exit": k[0], "said": k[2]}}


def shebang_chain():
    """``#!<wrapper>`` where the wrapper execs a fixed interpreter path: the interpreter there is replaced
    by another program, the wrapper and the script stay byte for byte the same."""
    import shutil
    wrap, script, real = ROOT / "run-python", ROOT / "engine.py", ROOT / "real-interpreter"
    wrap.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n'); wrap.chmod(0o755)
    script.write_text(f"#!{wrap}\nprint('engine ready')\n"); script.chmod(0o755)
    hashes = []
    for program in ("/bin/true", "/bin/false"):
        shutil.copyfile(program, real); real.chmod(0o755)
        hashes.append(py("from workbench.measure.engine.command import EngineCommand\n"
                         "from workbench.measure.engine.build import build_files, identify\n"
                         "try:\n  f = build_files(EngineCommand(sys.argv[1], 'x')); print([r for r, _ in f], identify(f)[1][:20])\n"
                         "except Exception as e: print(type(e).__name__)", script))
    return {"hashed": hashes, "same_hash": hashes[0] == hashes[1]}


for probe in (lock_dir_swapped, merge_basic_time, merge_own_name, figures_onto_ledger, synth_over_index,
              sweep_yaml, shebang_chain):
    print(json.dumps({probe.__name__: probe()}, default=str), flush=True)
