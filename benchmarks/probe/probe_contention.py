"""Does the copy engine slow down while readers pread the page cache? (issue 25, the 16 GB load)

    python3 benchmarks/probe/probe_contention.py --device cuda --file MODEL [--out contention.json]

At 16 GB `ring` is bound by the copy engine (its readers wait on fences), yet the stream took ~1.16x the
engine's lone DMA time (H200, 2026-12-03, call 4: 338.7 ms streaming against 290.2 ms at 55.3 GB/s), and
neither more slots (32 against 20: 1.00x [0.80-1.44]) nor fewer, larger copies (16 MiB windows: 0.97x
[0.50-1.34]) moved it (fourth pass, call 1, n = 6). What is left: the engine's reads of host memory
competing with the readers' memcpy out of the page cache (each byte a reader copies is read once and
written once in host memory while the DMA reads it again).

For each reader count N (``--readers``, default 0,4,8,12,16), in one process, warm file, best of
``--repeat``:

* ``engine_gbps``: ``--total`` bytes (default 2 GiB) sent host→device as ``--piece`` (8 MiB) copies cycling
  through ``--slots`` (20) registered huge-page slots, as the ring's are, while N threads pread the warm
  file into their own touched ``--piece`` buffers the whole time;
* ``reads_gbps``: what those N readers read together during that window;
* ``reads_alone_gbps``: the same N readers over the same span with no copies running.

With ``--into-slots`` each case runs a second time (``readers_N_into_slots``) with reader k preading into
the engine's own slot k mod ``--slots``, as the ring's readers do: the DMA then reads memory the CPU has
just written (its lines dirty in the CPU's caches), where the first run's DMA reads memory nobody writes.

N = 0 is the engine alone. Prints one JSON object (and writes it to ``--out``). Not a timed test; the
result is a ratio measured side by side in one process (engine under N readers ÷ engine alone).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_staging import finish, fresh, probe_args, registered_slots, start, touch  # noqa: E402

from workbench.upload import open_device  # noqa: E402

MiB = 1 << 20


class Readers:
    """``n`` threads preading ``path`` into their own touched ``piece`` buffers until stopped (``into``:
    reader k into ``into[k % len(into)]`` instead, buffers the caller owns); ``bytes()`` is what they have
    read so far (a sum of per-thread counters, read without stopping them)."""

    def __init__(self, path: str, n: int, piece: int, into: list[tuple[Any, memoryview]] | None = None):
        self.path, self.piece = path, piece
        self.size = os.path.getsize(path)
        self.counts = [0] * n
        self.stop = threading.Event()
        self.owned = into is None
        self.bufs = [fresh(piece) for _ in range(n)] if into is None else [into[k % len(into)] for k in range(n)]
        if self.owned:
            for b in self.bufs:
                touch(b)
        self.threads = [threading.Thread(target=self._read, args=(k,), daemon=True) for k in range(n)]

    def _read(self, k: int) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        span = max(self.size // self.piece, 1)
        i = k * 7  # spread the readers over the file
        try:
            while not self.stop.is_set():
                off = (i % span) * self.piece
                got = os.preadv(fd, [self.bufs[k][1]], off)
                self.counts[k] += got
                i += 1
        finally:
            os.close(fd)

    def bytes(self) -> int:
        return sum(self.counts)

    def __enter__(self) -> "Readers":
        for t in self.threads:
            t.start()
        time.sleep(0.02)  # every reader under way before anything is timed
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        if self.owned:
            for m, v in self.bufs:
                v.release()
                m.close()


def engine_under_readers(device: Any, path: str, readers: int, total: int, piece: int, slots: int,
                         repeat: int, into_slots: bool = False) -> dict[str, float]:
    """The copy engine's GB/s for ``total`` bytes while ``readers`` threads pread ``path`` (``into_slots``:
    into the engine's own slots); their GB/s then, and alone over as long a span (best of ``repeat`` each)."""
    span_bytes = min(total, 1 << 30)  # one device buffer, written round and round
    dst = device.alloc(span_bytes)
    out = {"engine_gbps": 0.0, "reads_gbps": 0.0, "reads_alone_gbps": 0.0}
    try:
        with registered_slots(device, slots, piece) as ring:  # every copy done, the slots given back after
            device.copy_h2d(dst, 0, ring[0][1])  # the first copy's setup outside the timing
            device.synchronize()
            spans = []
            for _ in range(repeat):
                with Readers(path, readers, piece, ring if into_slots else None) as r:
                    b0, t0 = r.bytes(), time.perf_counter()
                    for i, o in enumerate(range(0, total, piece)):
                        n = min(piece, total - o)
                        device.copy_h2d(dst, o % span_bytes, ring[i % slots][1][:n], asynchronous=True)
                    device.synchronize()
                    took = time.perf_counter() - t0
                    read = r.bytes() - b0
                spans.append(took)
                out["engine_gbps"] = max(out["engine_gbps"], total / took / 1e9)
                out["reads_gbps"] = max(out["reads_gbps"], read / took / 1e9)
            if readers:
                span = sorted(spans)[len(spans) // 2]
                for _ in range(repeat):
                    with Readers(path, readers, piece, ring if into_slots else None) as r:
                        b0, t0 = r.bytes(), time.perf_counter()
                        time.sleep(span)
                        took, read = time.perf_counter() - t0, r.bytes() - b0
                    out["reads_alone_gbps"] = max(out["reads_alone_gbps"], read / took / 1e9)
    finally:
        device.free(dst)
    return {k: round(v, 2) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = probe_args(__doc__)
    ap.add_argument("--readers", default="0,4,8,12,16")
    ap.add_argument("--total", type=int, default=2048, help="MiB sent per timing")
    ap.add_argument("--piece", type=int, default=8, help="MiB per copy and per read")
    ap.add_argument("--slots", type=int, default=20)
    ap.add_argument("--into-slots", action="store_true", help="also each case with the readers writing the engine's slots")
    args = ap.parse_args(argv)
    out = start(args, total_mib=args.total, piece_mib=args.piece, slots=args.slots)
    with open_device(args.device) as device:
        device.info()
        for into in (False, True) if args.into_slots else (False,):
            for n in (int(x) for x in args.readers.split(",")):
                if into and n == 0:
                    continue
                out[f"readers_{n}{'_into_slots' if into else ''}"] = engine_under_readers(
                    device, args.file, n, args.total * MiB, args.piece * MiB, args.slots, args.repeat, into)
        alone = out.get("readers_0", {}).get("engine_gbps")
        if alone:
            out["engine_under_readers_over_alone"] = {k: round(v["engine_gbps"] / alone, 3)
                                                      for k, v in out.items() if k.startswith("readers_")}
    return finish(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
