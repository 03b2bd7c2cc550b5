"""Where a warm miss's time goes (issue 34 §5): sessions run in this process — unbatched, batched, each
again with ``release_advice=free`` (MADV_FREE: an evicted slot keeps its pages, so a refill does not fault
them in afresh) and with ``release_advice=recycle`` (the evicting miss takes the evicted pages into its
slot), and batched with MADV_FREE on twice the lanes (``--arms`` picks) — ``--rounds`` times, in order then
reversed, every slice's phases timed on the thread that ran it.

    python benchmarks/bench/miss_breakdown.py --model M.gguf                  # host backend
    python benchmarks/bench/miss_breakdown.py --model M.gguf --device cuda    # what the device path adds

Unbatched, a lane's job is the cache's ``fill`` (the read into the slice's slot; timed around the call
on the lane), and the decode thread waits for it (read), then ``put``\\ s every landed slice, hit or miss,
to the device and drains (upload; ``put`` timed per call). Either way the decode thread's ``admit`` of a miss
(its evictions, and under recycle the moves) is timed per call. Batched, the lanes' own tally
(:class:`~workbench.expert.miss.lane_stage.StageTally`: fill, copy into page-locked slots, waiting for a
slot, issuing a slot's copy) and the decode thread's waits. Turn 0 (the cache filling) is left out; the
page cache is warmed before each session. Per path: µs a slice and GB/s of each phase on its thread, the
decode thread's ms a layer by cause, and the session's staged GB/s and tok/s. Every path also times each
``os.preadv`` the lanes make, by wall clock and by the lane's own CPU (the kernel's copy): what the call
spent waiting — in the kernel, or for the interpreter's lock on its way back — is the difference. Prints
Markdown (writes it to ``--out`` instead).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_session import _emit  # noqa: E402

from workbench.expert.miss.lane_stage import StageTally  # noqa: E402
from workbench.expert.session import ExpertSession  # noqa: E402
from workbench.expert.session_config import SessionConfig  # noqa: E402
from workbench.formats import open_index  # noqa: E402
from workbench.io.pagecache import warm_file  # noqa: E402
from workbench.upload import open_device  # noqa: E402


class _Timed:
    """Seconds (wall, and the calling thread's CPU) and calls of one wrapped method, from any thread."""

    def __init__(self) -> None:
        self.s, self.cpu, self.n, self.nbytes, self._lock = 0.0, 0.0, 0, 0, threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.s, self.cpu, self.n, self.nbytes = 0.0, 0.0, 0, 0

    def wrap(self, fn, size=None):
        def timed(*args, **kw):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                dt, dc = time.perf_counter() - t0, time.thread_time() - c0
                with self._lock:
                    self.s += dt
                    self.cpu += dc
                    self.n += 1
                    self.nbytes += size(*args) if size else 0
        return timed


def _asked(buffers, offset) -> int:  # noqa: ARG001 - os.preadv's (fd, buffers, offset) after the fd
    return sum(memoryview(b).nbytes for b in buffers)


def one_session(index, device, cfg: SessionConfig) -> dict:
    """One session; its phases after turn 0 (see the module docstring)."""
    for f in index.files:
        warm_file(f.path)
    fill, put, drain, admit, syscall = _Timed(), _Timed(), _Timed(), _Timed(), _Timed()
    preadv = os.preadv  # every read of the turns' misses (the readers call os.preadv): wall and CPU per call
    os.preadv = syscall.wrap(preadv, lambda fd, buffers, offset: _asked(buffers, offset))
    try:
        return _one(index, device, cfg, fill, put, drain, admit, syscall)
    finally:
        os.preadv = preadv


def _one(index, device, cfg, fill, put, drain, admit, syscall) -> dict:
    with ExpertSession(index, device, cfg) as s:
        size = lambda key, reader: s.cache.layouts[key.blob].slice(key.expert)[1]  # noqa: E731
        s.cache.fill = fill.wrap(s.cache.fill, size)
        s.cache.admit = admit.wrap(s.cache.admit)
        s.decoder.uploader.put = put.wrap(s.decoder.uploader.put, lambda arena, at, view: len(view))
        s.decoder.uploader.drain = drain.wrap(s.decoder.uploader.drain)
        batch, rest = s.decoder.batch, []
        for n, record in enumerate(s.turns()):
            if n == 0:  # the cache filling: left out
                for timed in (fill, put, drain, admit, syscall):
                    timed.reset()
                if batch is not None:
                    batch.tally = StageTally()
            else:
                rest.append(record)
    layers = sum(r.tokens for r in rest) * len(s.trace.layers)
    tally = batch.tally if batch is not None else StageTally()
    return dict(
        records=rest, layers=layers, fill=fill, put=put, drain=drain, admit=admit, syscall=syscall, tally=tally,
        misses=sum(r.misses for r in rest), slices=sum(r.misses + r.hits for r in rest),
        read_bytes=sum(r.bytes_read for r in rest), landed=sum(r.landed_bytes for r in rest),
        tok_s=sum(r.tokens for r in rest) / sum(r.seconds for r in rest),
        staged=sum(r.bytes_read for r in rest) / sum(r.read_busy_s for r in rest) / 1e9,
        read_ms=1e3 * sum(r.stall_read_s for r in rest) / layers, upload_ms=1e3 * sum(r.stall_upload_s for r in rest) / layers,
        book_ms=1e3 * sum(r.bookkeeping_s for r in rest) / layers)


def _rate(nbytes: int, s: float) -> str:
    return f"{nbytes / s / 1e9:.2f}" if s > 0 else "—"


def rows(label: str, runs: list[dict]) -> list[str]:
    """One row per phase: µs a slice (a fill: a miss) and GB/s on its thread, medians over runs."""
    med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
    out = [f"| {label} | decode: admit (a miss: evictions; recycle's moves) | "
           f"{med(lambda r: 1e6 * r['admit'].s / max(r['admit'].n, 1)):.0f} | — |"]
    if runs[0]["tally"].slices == 0:  # unbatched: the wrapped calls (the uploader's, unused batched)
        out.append(f"| {label} | lane: fill (read into the cache) | {med(lambda r: 1e6 * r['fill'].s / max(r['fill'].n, 1)):.0f} "
                   f"| {med(lambda r: r['fill'].nbytes / r['fill'].s / 1e9 if r['fill'].s else 0):.2f} |")
        out.append(f"| {label} | decode: put (every landed slice) | {med(lambda r: 1e6 * r['put'].s / max(r['put'].n, 1)):.0f} "
                   f"| {med(lambda r: r['put'].nbytes / r['put'].s / 1e9 if r['put'].s else 0):.2f} |")
    else:
        for name, say in (("fill_s", "lane: fill (read into the cache)"), ("copy_s", "lane: copy into slots"),
                          ("slot_wait_s", "lane: wait for a slot"), ("issue_s", "lane: issue a slot's copy")):
            per = med(lambda r: 1e6 * getattr(r["tally"], name)  # a fill is a miss's; the rest every slice's
                      / max(r["misses"] if name == "fill_s" else r["tally"].slices, 1))
            nbytes = "fill" if name == "fill_s" else "all"
            gbps = med(lambda r: (r["tally"].nbytes if nbytes == "all" else r["read_bytes"])
                       / getattr(r["tally"], name) / 1e9 if getattr(r["tally"], name) else 0)
            out.append(f"| {label} | {say} | {per:.0f} | {gbps:.2f} |")
        out.append(f"| {label} | lane: copies issued a slice | {med(lambda r: r['tally'].copies / max(r['tally'].slices, 1)):.2f} | — |")
    # inside a fill, the read call itself: its wall time, and the lane's CPU in it (the kernel's copy); the
    # difference is the call waiting — in the kernel, or for the interpreter's lock on its way back
    for what, key in (("wall", "s"), ("the lane on CPU", "cpu")):
        out.append(f"| {label} | lane: preadv call ({what}) | "
                   f"{med(lambda r: 1e6 * getattr(r['syscall'], key) / max(r['syscall'].n, 1)):.0f} | "
                   f"{med(lambda r: r['syscall'].nbytes / getattr(r['syscall'], key) / 1e9 if getattr(r['syscall'], key) else 0):.2f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="host")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--cache-mib", type=float, default=64.0)
    ap.add_argument("--lanes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--arms", default="unbatched,batched,unbatched free,batched free,unbatched recycle,batched recycle",
                    help="comma-separated, of: unbatched, batched, each optionally with ' free' or ' recycle' "
                         "(the release advice) or ' pool' (placement=pool), 'unbatched pool eager' (schedule=eager; ' lock': "
                         "lane_handoff=lock) and "
                         "'batched free 2x' (twice the lanes)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    known = {"unbatched": {}, "batched": dict(batch_misses=True),  # MADV_FREE: a refill reuses its pages
             "unbatched free": dict(release_advice="free"),
             "batched free": dict(batch_misses=True, release_advice="free"),
             "unbatched recycle": dict(release_advice="recycle"),  # the evicting miss takes the pages
             "batched recycle": dict(batch_misses=True, release_advice="recycle"),
             "unbatched pool": dict(placement="pool"),  # page-locked frames: reads into resident pages, DMA from them
             "batched pool": dict(batch_misses=True, placement="pool"),
             "unbatched pool eager": dict(placement="pool", schedule="eager"),  # the next layer planned before the misses
             "unbatched pool eager lock": dict(placement="pool", schedule="eager", lane_handoff="lock"),  # no futures
             "batched free 2x": dict(batch_misses=True, release_advice="free", lanes=2 * args.lanes)}
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in names if a not in known]
    if unknown or not names:
        print(f"miss_breakdown: --arms: {', '.join(unknown) or 'none named'} not of {', '.join(known)}", file=sys.stderr)
        return 2
    index = open_index(args.model)
    device = open_device(args.device)
    arms = {a: known[a] for a in names}
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    try:
        for rnd in range(args.rounds):
            for arm in (list(arms) if rnd % 2 == 0 else list(reversed(arms))):  # in order, then reversed
                cfg = SessionConfig(**{**dict(turns=args.turns, tokens=args.tokens, cache_mib=args.cache_mib,
                                              lanes=args.lanes, overlap=True, compute="none", reader="pread"),
                                       **arms[arm]})
                runs[arm].append(one_session(index, device, cfg))
    finally:
        device.close()
    first = runs[names[0]][0]
    lines = [f"Where a warm miss's time goes — {args.device}, `{Path(args.model).name}`, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.turns} turns × {args.tokens} tokens, "
             f"cache {args.cache_mib:g} MiB, {args.lanes} lanes, overlap, compute none, reader pread, warm; "
             f"{args.rounds} sessions an arm (in order, then reversed), turn 0 left out; per layer {first['slices'] / first['layers']:.1f} "
             f"slices, {first['misses'] / first['layers']:.1f} misses, "
             f"{first['landed'] / first['layers'] / 2**20:.2f} MiB landed.", "",
             "| path | phase (thread) | µs a slice | GB/s on its thread |", "|---|---|---|---|"]
    for arm in arms:
        lines += rows(arm, runs[arm])
    lines += ["", "| path | decode: read wait ms/layer | upload wait ms/layer | bookkeeping ms/layer | staged GB/s | tok/s |",
              "|---|---|---|---|---|---|"]
    for arm in arms:
        med = lambda k: statistics.median(r[k] for r in runs[arm])  # noqa: E731,B023
        lines.append(f"| {arm} | {med('read_ms'):.2f} | {med('upload_ms'):.2f} | {med('book_ms'):.2f} | "
                     f"{med('staged'):.2f} | {med('tok_s'):.2f} |")
    _emit(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
