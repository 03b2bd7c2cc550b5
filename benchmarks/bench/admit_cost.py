"""What an expert cache's admission costs its thread by release advice (issue 34 §5): one cache on one
thread (no lanes, no session), ``--lookups`` uniform lookups of a model's experts, each miss admitted,
read and unpinned; of the lookups after ``--warm`` (the cache full by then), the µs of each
``MADV_DONTNEED`` / ``MADV_FREE`` release and each ``mremap`` move (``recycle``), the µs of a whole
admission, and the process's mappings at the end (``/proc/self/maps``: a moved run is a mapping of its own).

    python benchmarks/bench/admit_cost.py --model M.gguf [--cache-mib 64] [--lookups 8000] [--warm 3000]
        [--advices dontneed,free,recycle]

Each advice runs in a fresh process (mappings do not carry over). Prints one line an advice.
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.expert import memory  # noqa: E402
from workbench.expert.cache import ExpertCache, SliceKey  # noqa: E402
from workbench.formats import open_index  # noqa: E402


def one(model: str, advice: str, cache_mib: float, lookups: int, warm: int, seed: int = 0) -> dict:
    """In this process: the figures of one advice (see the module docstring)."""
    index = open_index(model)
    timed = {"release": [0.0, 0], "move": [0.0, 0], "admit": [0.0, 0]}
    on = [False]

    def wrap(name, fn):
        def call(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                if on[0]:
                    timed[name][0] += time.perf_counter() - t0
                    timed[name][1] += 1
        return call

    memory.Reservation.release = wrap("release", memory.Reservation.release)
    memory.Reservation.move_in = wrap("move", memory.Reservation.move_in)
    rnd = random.Random(seed)
    with ExpertCache(index.path, index.blobs, budget_bytes=int(cache_mib * 2**20), release_advice=advice,
                     reader="pread") as cache:
        for step in range(lookups):
            on[0] = step >= warm
            blob = rnd.randrange(len(index.blobs))
            key = SliceKey(blob, rnd.randrange(len(index.blobs[blob].slices)))
            if cache.lookup(key):
                continue
            t0 = time.perf_counter()
            kind = cache.admit(key)
            if on[0]:
                timed["admit"][0] += time.perf_counter() - t0
                timed["admit"][1] += 1
            cache.complete(key, cache.fill(key, cache.reader(kind, cache.file_of(key))), kind)
            cache.unpin(key)
        with open("/proc/self/maps", encoding="ascii", errors="replace") as fh:
            maps = sum(1 for _ in fh)
        recycled = cache.counters().recycled_pages
    return {"advice": advice, "maps": maps, "recycled_pages": recycled,
            **{f"{k}_us": (s / n * 1e6 if n else None) for k, (s, n) in timed.items()},
            **{f"{k}_calls": n for k, (_, n) in timed.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cache-mib", type=float, default=64.0)
    ap.add_argument("--lookups", type=int, default=8000)
    ap.add_argument("--warm", type=int, default=3000, help="lookups left out first (the cache filling)")
    ap.add_argument("--advices", default="dontneed,free,recycle")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # in the child: one advice, JSON
    args = ap.parse_args(argv)
    if args.warm >= args.lookups:
        print("admit_cost: --warm must be below --lookups", file=sys.stderr)
        return 2
    if args.one:
        print(json.dumps(one(args.model, args.advices, args.cache_mib, args.lookups, args.warm)))
        return 0
    us = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
    for advice in [a.strip() for a in args.advices.split(",") if a.strip()]:
        done = subprocess.run([sys.executable, __file__, "--one", "--model", args.model, "--cache-mib",
                               str(args.cache_mib), "--lookups", str(args.lookups), "--warm", str(args.warm),
                               "--advices", advice], capture_output=True, text=True)
        if done.returncode:
            print(f"admit_cost: {advice}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}", file=sys.stderr)
            return 2
        r = json.loads(done.stdout)
        print(f"{advice}: admit {us(r['admit_us'])} µs × {r['admit_calls']}, release {us(r['release_us'])} µs × "
              f"{r['release_calls']}, move {us(r['move_us'])} µs × {r['move_calls']}, recycled pages "
              f"{r['recycled_pages']:,}, mappings at the end {r['maps']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
