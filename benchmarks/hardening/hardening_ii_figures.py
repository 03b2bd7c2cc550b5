"""Issue 19's examples, measured: run with PYTHONPATH=<a checkout> to measure that checkout's code, e.g.
``PYTHONPATH=$PWD python benchmarks/hardening/hardening_ii_figures.py`` here and with another worktree for "before".
Each line is one class's example and what happened (docs/hardening/README.md, "Hardening II")."""
import json, os, shutil, signal, sqlite3, stat, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(tempfile.mkdtemp(prefix="fig19-"))
PY = sys.executable
ENV = {**os.environ, "WORKBENCH_LOCK_DIR": str(ROOT / "locks"), "WORKBENCH_LEDGER_BUSY_TIMEOUT": "2"}


def wb(*args, env=None, timeout=120):
    t0 = time.monotonic()
    p = subprocess.run([PY, "-m", "workbench.cli", *map(str, args)], capture_output=True, text=True,
                       env={**ENV, **(env or {})}, timeout=timeout)
    return p.returncode, time.monotonic() - t0, (p.stdout + p.stderr).strip().splitlines()[-1:] 


TESTS = Path(__file__).resolve().parents[2] / "tests"  # fill_ledger: a baseline, a faster and a failed attempt


def ledger(path):
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from ledger_helpers import fill_ledger; fill_ledger(sys.argv[1])"
    subprocess.run([PY, "-c", code, str(path)], check=True, env=ENV)


def lock():
    d = ROOT / "lockdir"; d.mkdir(); os.chmod(d, 0o1777)
    victim = ROOT / "victim"; victim.write_text("root:secret\n"); os.chmod(victim, 0o600)
    os.symlink(victim, d / "device-host.lock")
    code = "import sys; from workbench.measure.lock.device import DeviceLock\ntry:\n  DeviceLock('host', sys.argv[1]).acquire(); print('acquired')\nexcept Exception as e: print(type(e).__name__)"
    out = subprocess.run([PY, "-c", code, str(d)], capture_output=True, text=True, env=ENV).stdout.strip()
    return {"result": out, "victim_mode": oct(stat.S_IMODE(os.stat(victim).st_mode)), "victim": victim.read_text()}


def export_onto_ledger():
    l = ROOT / "e.sqlite"; ledger(l)
    rc, _, tail = wb("ledger", "--ledger", l, "export", "--markdown", l)
    return {"exit": rc, "ledger_still_sqlite": l.read_bytes()[:15] == b"SQLite format 3", "said": tail}


def list_behind_lock():
    l = ROOT / "k.sqlite"; ledger(l)
    h = sqlite3.connect(l, isolation_level=None); h.execute("BEGIN EXCLUSIVE"); h.execute("UPDATE campaigns SET description='x'")
    try:
        rc, secs, tail = wb("ledger", "--ledger", l, "list")
    finally:
        h.execute("ROLLBACK"); h.close()
    return {"exit": rc, "seconds": round(secs, 2), "said": tail[0][:100] if tail else ""}


def list_foreign():
    f = ROOT / "app.db"; c = sqlite3.connect(f); c.execute("CREATE TABLE users(n)"); c.commit(); c.close()
    rc, _, tail = wb("ledger", "--ledger", f, "list")
    c = sqlite3.connect(f)
    tables = sorted(r[0] for r in c.execute("select name from sqlite_master where type='table'"))
    return {"exit": rc, "tables_after": len(tables), "journal": c.execute("pragma journal_mode").fetchone()[0]}


def killed_merge():
    a, b = ROOT / "ma.sqlite", ROOT / "mb.sqlite"; ledger(a); ledger(b)
    scratch = ROOT / "tmp"; scratch.mkdir()
    code = ("import os, signal, sys\nimport workbench.ledger.merge as m\nfrom workbench.ledger import Ledger\n"
            "def die(*a, **k): os.kill(os.getpid(), signal.SIGKILL)\nm.check_ledger = die\n"
            "Ledger(sys.argv[1]).merge(sys.argv[2])")
    subprocess.run([PY, "-c", code, str(a), str(b)], env={**ENV, "TMPDIR": str(scratch), "SQLITE_TMPDIR": str(scratch)})
    left = [p for p in scratch.rglob("*") if p.is_file()]
    return {"files_left": len(left), "bytes_left": sum(p.stat().st_size for p in left), "other_ledger_bytes": b.stat().st_size}


def hypothesis_30mb():
    a, b = ROOT / "ha.sqlite", ROOT / "hb.sqlite"; ledger(a); ledger(b)
    c = sqlite3.connect(b); c.execute("UPDATE attempts SET hypothesis = ? WHERE rowid = 1", ("x" * (30 << 20),)); c.commit(); c.close()
    rc, secs, tail = wb("ledger", "--ledger", a, "merge", b)
    return {"exit": rc, "seconds": round(secs, 2), "said": tail[0][-90:] if tail else ""}


def runner_killed():
    model = ROOT / "m.gguf"
    subprocess.run([PY, "-m", "workbench.cli", "synth", model, "--format", "gguf", "--size", "256KiB"], env=ENV, capture_output=True)
    eng = ROOT / "eng.py"
    eng.write_text("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        open(sys.argv[1] + '.d', 'w').write(str(os.getpid())); time.sleep(120)\n    os._exit(0)\n"
                   "open(sys.argv[1] + '.e', 'w').write(str(os.getpid())); time.sleep(120)\n")
    out, l = ROOT / "pids", ROOT / "r.sqlite"
    p = subprocess.Popen([PY, "-m", "workbench.cli", "external", "--cmd", f"{PY} {eng} {out}", "--marker", "never",
                          "--file", model, "--runs", "2", "--cache", "asis", "--device", "host", "--ledger", l],
                         env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (Path(f"{out}.d").exists() and Path(f"{out}.e").exists()):
        time.sleep(0.05)
    pids = [int(Path(f"{out}.{n}").read_text()) for n in "ed"]
    p.kill(); p.wait(); t0 = time.monotonic()
    alive = lambda: [x for x in pids if os.path.exists(f"/proc/{x}") and open(f"/proc/{x}/stat").read().rpartition(")")[2].split()[0] != "Z"]
    while alive() and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    left = alive(); gone_s = round(time.monotonic() - t0, 3)
    for x in left:
        os.kill(x, signal.SIGKILL)
    n = sqlite3.connect(l).execute("select count(*) from attempts").fetchone()[0] if l.exists() else 0
    return {"attempts": n, "processes_left_after_5s": len(left), "all_gone_after_s": gone_s if not left else None}


def hostile_text():
    l = ROOT / "t.sqlite"; ledger(l)
    c = sqlite3.connect(l)
    c.execute("UPDATE attempts SET label = ?, hypothesis = ?", ("<img src=x onerror=alert(1)>\r# H \x1b]52;c;eA==\x07", "![i](http://e/p.png)"))
    c.commit(); c.close()
    p = subprocess.run([PY, "-m", "workbench.cli", "ledger", "--ledger", l, "list"], capture_output=True, text=True, env=ENV)
    md = subprocess.run([PY, "-m", "workbench.cli", "ledger", "--ledger", l, "export", "--markdown", "-", "--all"],
                        capture_output=True, text=True, env=ENV).stdout
    from markdown_it import MarkdownIt
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    return {"list_escape_bytes": sum(p.stdout.count(ch) for ch in "\x1b\x07\r"), "list_lines": len(p.stdout.splitlines()),
            "markdown_img_tags": html.count("<img"), "markdown_headings": html.count("<h1")}


def sweep_path():
    data = ROOT / "data"; (data / "models").mkdir(parents=True)
    (ROOT / "outside.gguf").write_bytes(b"x")
    y = ROOT / "s.yaml"; y.write_text(json.dumps({"notebook": "03_expert_slices", "campaign": "c", "parameters": {"file_64": "../outside.gguf"}}))
    rc, _, tail = wb("sweep", y, "--dry-run", env={"WORKBENCH_DATA": str(data)})
    y.write_text(json.dumps({"notebook": "01_load_sweep", "campaign": "..", "parameters": {}}))
    rc2, _, tail2 = wb("sweep", y, "--dry-run", env={"WORKBENCH_DATA": str(data)})
    return {"file_64_outside_exit": rc, "campaign_dotdot_exit": rc2, "said": (tail2 or [""])[0][:120]}


if __name__ == "__main__":
    results = {}
    for fn in (lock, export_onto_ledger, list_behind_lock, list_foreign, killed_merge, hypothesis_30mb, runner_killed,
               hostile_text, sweep_path):
        try:
            results[fn.__name__] = fn()
        except Exception as exc:
            results[fn.__name__] = f"error: {exc!r}"[:200]
        print(fn.__name__, json.dumps(results[fn.__name__]), flush=True)
    shutil.rmtree(ROOT, ignore_errors=True)
