"""The figures of docs/hardening/README.md, issue 24 §3: kill a run holding each kind of leftover and time
its removal. ``PYTHONPATH=. python benchmarks/hardening/leftovers_figures.py [DIR]`` (root, a v1 or v2 memory cgroup, swap
allowed: the 2-core VM)."""
import os, subprocess, sys, time, glob
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from process_helpers import wait_for
from workbench.formats.synth import write_synthetic
from workbench.measure.session import cgroups
from workbench.measure.session.pressure import MemoryPressure
d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wb-leftovers"
os.makedirs(d, exist_ok=True)
m = f"{d}/m.gguf"
if not os.path.exists(m):
    write_synthetic(m, format="gguf", layout="moe", size=8 << 20, experts=64, alignment=64, seed=1)
with MemoryPressure(64, "cgroup") as p:
    parent = os.path.dirname(p.limit.path)
before = set(os.listdir(parent))
env = {**os.environ, "WORKBENCH_LOCK_DIR": d + "/locks"}
proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "session", m, "--turns", "500", "--tokens", "4",
                         "--compute", "sleep:20", "--cache-mib", "1", "--memory-limit", "512", "--cache", "cold",
                         "--ledger", d + "/l.sqlite"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
new = lambda: [n for n in os.listdir(parent) if n not in before and n.startswith(cgroups.PREFIX)]
wait_for(lambda: any(open(f"{parent}/{n}/cgroup.procs").read().strip() for n in new()), 60, "no join")
time.sleep(2)
proc.kill(); proc.wait()
wait_for(lambda: not any(open(f"{parent}/{n}/cgroup.procs").read().strip() for n in new()), 10, "worker")
left = new()
usage = [int(open(f"{parent}/{n}/memory.usage_in_bytes").read()) for n in left]
t = time.perf_counter()
with MemoryPressure(64, "cgroup") as p:
    took = time.perf_counter() - t
    print("cgroup: left", len(left), "charged MiB", [u / 2**20 for u in usage], "next start:", p.limit.detail.split(";")[-1], f"{took*1e3:.1f} ms to make (reaping included)", "stale left:", len(new()) - 1)
# balloon
def mlocked():
    return next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("Mlocked:")) * 1024
c = subprocess.Popen([sys.executable, "-c", "from workbench.measure.session.balloon import Balloon; b=Balloon(512<<20).inflate(); print('h', flush=True); import time; time.sleep(99)"], stdout=subprocess.PIPE, text=True)
c.stdout.readline(); held = mlocked(); t = time.perf_counter(); c.kill(); c.wait()
wait_for(lambda: mlocked() <= held - 500 * 2**20, 10, "mlock")
print(f"balloon: 512 MiB locked, Mlocked back {1e3*(time.perf_counter()-t):.0f} ms after SIGKILL")
# swap
from workbench.measure.session.swap import enabled
c = subprocess.Popen([sys.executable, "-c", f"from workbench.measure.session.swap import SwapFile; s=SwapFile('{d}', 256).__enter__(); print(s.path, flush=True); import time; time.sleep(99)"], stdout=subprocess.PIPE, text=True)
path = c.stdout.readline().strip(); t = time.perf_counter(); c.kill(); c.wait()
wait_for(lambda: path not in enabled() and not os.path.exists(path), 10, "swap")
print(f"swap: 256 MiB swap file off and deleted {1e3*(time.perf_counter()-t):.0f} ms after SIGKILL of its run")
# ceilings scratch
c = subprocess.Popen([sys.executable, "-c", f"from workbench.measure.ceilings.walls import _write_scratch; print(_write_scratch('{d}', 256<<20), flush=True); import time; time.sleep(99)"], stdout=subprocess.PIPE, text=True)
path = c.stdout.readline().strip(); c.kill(); c.wait()
size = os.path.getsize(path)
from workbench.measure.lock.scratch import make_scratch
t = time.perf_counter(); fd, p2 = make_scratch(d, "ceilings"); took = time.perf_counter() - t; os.close(fd); os.unlink(p2)
print(f"ceilings scratch: {size>>20} MiB left by SIGKILL; next start removed it: {not os.path.exists(path)} in {took*1e3:.1f} ms")
