"""Issue 24 §2's hostile index shapes, timed: run with PYTHONPATH=<a checkout> to measure that checkout's
code (``PYTHONPATH=$PWD python benchmarks/hardening/fuzz_bounds.py``; a checkout of the commit before for "before").

Each shape is built once in a temporary directory, then indexed in a fresh process (``open_index``) under
a wall limit; a line per shape: wall and CPU seconds, the child's peak RSS (VmHWM), and the first 120 characters of what it
said. The shapes are those of tests/test_formats_bounds.py, where CI fails any that takes a second of CPU,
and the descriptor case of tests/test_load_descriptors.py (a set of SHARDS files, ``ring`` with the
eviction policy, RLIMIT_NOFILE lowered in the child).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LIMIT_S = float(os.environ.get("FUZZ_BOUNDS_LIMIT_S", "120"))
SHARDS = 256
EMPTY_ST = b"\x08\0\0\0\0\0\0\0{}      "
CHILD = """
import json, resource, sys, time
path, soft = sys.argv[1], int(sys.argv[2])
if soft:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft))
from workbench.formats import open_index
t0, c0 = time.perf_counter(), time.process_time()
try:
    index = open_index(path)
    said = f"indexed: {len(index.files)} files"
    if soft:
        from workbench.strategies import get_strategy
        from workbench.upload import open_device
        with open_device("host") as device:
            get_strategy("ring").from_strings({"evict": "1"}).load(index, device)
        said += ", ring evict=1 loaded"
except Exception as exc:
    said = f"{type(exc).__name__}: {exc}"
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]  # ru_maxrss outlives exec: not this
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "said": said[:160],
                  "peak_rss_mib": int(hwm[0].split()[1]) / 1024 if hwm else None}))
"""


def _index(directory: Path, entries: list[bytes]) -> Path:
    directory.mkdir(parents=True)
    (directory / "model.safetensors.index.json").write_bytes(
        b'{"metadata": {}, "weight_map": {' + b",".join(entries) + b"}}")
    return directory


def shapes(root: Path) -> dict[str, tuple[Path, int]]:
    deep = "/".join(["d"] * 2_000).encode()
    count = root / "count"
    count.mkdir()
    (count / "model-00001-of-99999.safetensors").write_bytes(EMPTY_ST)
    many = root / "many"
    many.mkdir()
    import numpy as np
    from safetensors.numpy import save_file

    for i in range(SHARDS):
        save_file({f"l.{i}": np.full((7, 3), i % 255, dtype=np.uint8)},
                  str(many / f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"))
    return {
        "1.1 M distinct missing names": (_index(root / "missing", [b'"t%d": "s%07d.safetensors"' % (i, i)
                                                                   for i in range(1_100_000)]), 0),
        "7,000 names 2,000 directories deep": (_index(root / "deep", [b'"t%d": "%s/s%d.safetensors"' % (i, deep, i)
                                                                      for i in range(7_000)]), 0),
        "-of-99999": (count / "model-00001-of-99999.safetensors", 0),
        "260,000 entries, one missing file": (_index(root / "same", [b'"model.layers.%d.w": "s.safetensors"' % i
                                                                     for i in range(260_000)]), 0),
        f"{SHARDS} shards, ring evict=1, RLIMIT_NOFILE 450": (many, 450),
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-bounds-") as tmp:
        for name, (path, soft) in shapes(Path(tmp)).items():
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(soft)], capture_output=True,
                                      text=True, timeout=LIMIT_S)
                line = json.loads(proc.stdout) if proc.returncode == 0 else {"said": proc.stderr[-160:]}
            except subprocess.TimeoutExpired:
                line = {"said": f"still running after {LIMIT_S:.0f} s: killed"}
            print(json.dumps({"shape": name, **line}), flush=True)


if __name__ == "__main__":
    main()
