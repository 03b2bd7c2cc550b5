"""What a session's cold misses can get from this machine's disk (issue 25, "MoE sessions"): random reads
of one expert slice each, the way the lanes read them, by reader kind, threads and read size.

    python3 benchmarks/probe/probe_slices.py MODEL [--threads 1,2,4,8,16] [--mib 192] [--out probe.json]

For each case ``--mib`` MiB are read at random page-aligned offsets of MODEL's first file (seeded), one
read per slice of the model's first expert blob's stride — and 2 strides (two neighbouring misses read
as one) and 4 MiB (the ceilings' read size):

* ``direct``: O_DIRECT into page-aligned memory (the ``direct-*`` readers; never the page cache);
* ``buffered``: preadv after fadvise(DONTNEED) of the whole file, default readahead (``pread``);
* ``random``: the same on a descriptor advised POSIX_FADV_RANDOM (``pread-random``).

Against ``workbench ceilings``' cold reads (sequential 4 MiB, from the start of a scratch file) this
says whether the lanes are bounded by depth (threads), by read size (coalescing), by readahead, or by
the disk's random-read rate itself. Prints one JSON object (GB/s per case) and writes it to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PAGE = 4096


def read_case(path: str, kind: str, threads: int, nbytes: int, total: int, seed: int) -> float:
    """GB/s of ``total`` bytes read in ``nbytes`` pieces at random offsets by ``threads`` threads."""
    size = os.path.getsize(path)
    nbytes = -(-nbytes // PAGE) * PAGE
    if kind != "direct":
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    rnd = random.Random(seed)
    offsets = iter([rnd.randrange(0, (size - nbytes) // PAGE) * PAGE for _ in range(max(1, total // nbytes))])
    lock = threading.Lock()

    def work() -> None:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if kind == "direct" else 0))
        if kind == "random":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        buf = mmap.mmap(-1, nbytes)  # page-aligned: O_DIRECT's rule
        try:
            while True:
                with lock:
                    at = next(offsets, None)
                if at is None:
                    return
                os.preadv(fd, [buf], at)
        finally:
            buf.close()
            os.close(fd)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return max(1, total // nbytes) * nbytes / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--mib", type=int, default=192, help="MiB read per case")
    ap.add_argument("--kinds", default="direct,buffered,random")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from workbench.formats import open_index

    index = open_index(args.model)
    if not index.blobs:
        sys.exit(f"{args.model}: no expert blobs: not a MoE model")
    stride = index.blobs[0].stride
    path = index.files[0].path
    out = {"model": args.model, "file": path, "stride": stride, "loadavg_before": open("/proc/loadavg").read().split()[:3],
           "gbps": {}}
    for kind in args.kinds.split(","):
        for nbytes in (stride, 2 * stride, 4 << 20):
            for t in map(int, args.threads.split(",")):
                key = f"{kind} {nbytes / 2**20:.2f}MiB {t}t"
                out["gbps"][key] = round(read_case(path, kind, t, nbytes, args.mib << 20, seed=t), 3)
                print(f"{key:<28} {out['gbps'][key]:.2f} GB/s", file=sys.stderr, flush=True)
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
