"""What starting a load's reader threads costs, by how they are started (issue 25's small-size fixed costs).

    python3 benchmarks/probe/probe_threads.py --file MODEL [--threads 8,16] [--repeat 15] [--out probe.json]

``ring`` starts its readers from the loading thread one by one. On the H200 (2026-12-03, fifth pass) the
first reader's start to the last's (``start_spread_us``) was 8.4 ms for 8 readers at 256 MiB and 21 ms for
15 at 2 GiB when each reader works as soon as it is started (``start=each``), and the loading thread's
start of them all took 2.3-3.7 ms when they are held until all are started (``start=together``). Which
part is Python's thread start itself, which the loading thread queuing for the GIL behind readers already
at work? Each case starts N threads in a fresh set and times the first ``start()`` call to the last
thread's first instruction (its birth), median of ``--repeat``:

* ``serial_idle``: one by one from this thread; each new thread waits on an event (``start=together``);
* ``serial_busy``: one by one; each thread preads 8 MiB pieces of the warm file in a loop as soon as it
  is born (``start=each``: the threads already at work hold the GIL between their reads);
* ``serial_busy_switch``: the same with the interpreter's switch interval at 0.1 ms while the threads
  start (CPython's default is 5 ms: a thread that asks for the GIL waits up to that long);
* ``tree_idle``: this thread starts the first; thread i starts threads 2i+1 and 2i+2 before it waits
  (the starts run side by side, log2(N) deep).

Prints one JSON object (ms per case and N) and writes it to ``--out``. Not a timed test.
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_staging import finish, probe_args, start  # noqa: E402

PIECE = 8 * 1024 * 1024


class Starts:
    """One set of N threads: their births, the stop event, and each thread's work once born."""

    def __init__(self, n: int, work: Callable[["Starts"], None]):
        self.n, self.work = n, work
        self.births: list[int] = []
        self.stop = threading.Event()
        self.all_born = threading.Event()
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def born(self) -> None:
        with self._lock:
            self.births.append(time.perf_counter_ns())
            if len(self.births) == self.n:
                self.all_born.set()

    def spawn(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self.threads.append(t)
        t.start()

    def launch(self, tree: bool) -> None:
        """Start the set: the tree's root (it starts the rest), or all N one by one from this thread."""
        if tree:
            self.spawn(self.body, 0, True)
        else:
            for i in range(self.n):
                self.spawn(self.body, i, False)

    def body(self, i: int, tree: bool) -> None:
        self.born()
        if tree:
            for child in (2 * i + 1, 2 * i + 2):
                if child < self.n:
                    self.spawn(self.body, child, True)
        self.work(self)

    def close(self) -> None:
        self.stop.set()
        while True:  # a tree's threads may still be starting children: join until none is left
            with self._lock:
                pending = [t for t in self.threads if t.is_alive()]
            if not pending:
                return
            for t in pending:
                t.join()


def idle(s: Starts) -> None:
    s.stop.wait()


def reader(path: str) -> Callable[[Starts], None]:
    def work(s: Starts) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            size, off = os.fstat(fd).st_size, 0
            buf = bytearray(PIECE)
            while not s.stop.is_set():
                os.preadv(fd, [buf], off)
                off = (off + PIECE) % max(PIECE, size - PIECE)
        finally:
            os.close(fd)
    return work


def one_set(n: int, work: Callable[[Starts], None], tree: bool = False, switch: float | None = None,
            limit_s: float = 30) -> float:
    """Milliseconds from the first ``start()`` to the last thread's birth, for one fresh set of ``n``."""
    s = Starts(n, work)
    old = sys.getswitchinterval()
    try:
        if switch is not None:
            sys.setswitchinterval(switch)
        t0 = time.perf_counter_ns()
        s.launch(tree)
        if not s.all_born.wait(limit_s):
            raise RuntimeError(f"only {len(s.births)} of {n} threads started in {limit_s} s")
        return (max(s.births) - t0) / 1e6
    finally:
        sys.setswitchinterval(old)
        s.close()


def main(argv: list[str] | None = None) -> int:
    ap = probe_args(__doc__)
    ap.add_argument("--threads", default="8,16", help="comma-separated set sizes")
    args = ap.parse_args(argv)
    out = start(args, switch_interval_s=sys.getswitchinterval())
    busy = reader(args.file)
    cases = {"serial_idle": dict(work=idle), "serial_busy": dict(work=busy),
             "serial_busy_switch": dict(work=busy, switch=1e-4), "tree_idle": dict(work=idle, tree=True)}
    for n in (int(x) for x in args.threads.split(",")):
        for name, kw in cases.items():
            ms = [one_set(n, **kw) for _ in range(args.repeat)]
            out[f"{name}_{n}t_ms"] = {"median": round(statistics.median(ms), 3), "min": round(min(ms), 3),
                                     "max": round(max(ms), 3), "n": len(ms)}
    return finish(out, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
