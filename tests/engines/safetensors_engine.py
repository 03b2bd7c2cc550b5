"""A small engine for the tests: loads every tensor of a safetensors file through the safetensors
package into numpy arrays, prints its own phase lines and a ready line, then idles until killed (the
workbench kills it at the marker). It knows nothing of the workbench."""
import argparse
import sys
import time

t_spawn = time.perf_counter()

import numpy as np  # noqa: E402 - the imports are part of what an engine's start-up costs
from safetensors import safe_open  # noqa: E402


def phase(name, since):
    """Print one phase line the way engines log them, and return the time for the next one."""
    now = time.perf_counter()
    print(f"[engine] phase {name}: {(now - since) * 1e3:.3f} ms")
    return now


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--idle-s", type=float, default=60.0, help="how long to live after the ready line")
    parser.add_argument("--init-ms", type=float, default=1000.0,
                        help="a device start-up stand-in before the weights, so the window is long enough to "
                             "time from outside even on a loaded machine (a reader scheduled later than this "
                             "gets the start and end marker in one read and the run fails: on the 2-core VM "
                             "at load 8-10, 2026-12-05, it did at 150 ms and at 300 ms (-n 2); longer eats "
                             "into the A/Bs' margin against the slow engine's stall)")
    args = parser.parse_args()
    t = phase("imports", t_spawn)
    time.sleep(args.init_ms / 1e3)
    t = phase("init", t)
    print("[engine] loading weights")
    with safe_open(args.file, framework="numpy") as f:
        names = list(f.keys())
        t = phase("open", t)
        tensors = {name: f.get_tensor(name) for name in names}
        t = phase("weights", t)
    checksum = sum(int(a.view(np.uint8)[::4096].sum()) for a in tensors.values())
    phase("checksum", t)
    nbytes = sum(a.nbytes for a in tensors.values())
    print(f"[engine] model ready: {len(tensors)} tensors, {nbytes} bytes, checksum {checksum}")
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
