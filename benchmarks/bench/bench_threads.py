"""Do the ring's reader threads scale, or serialize on the GIL? GB/s against reader threads, in process.

    python benchmarks/bench/bench_threads.py --device host --size 512MiB --runs 5
    python benchmarks/bench/bench_threads.py --device cuda --size 8GiB --runs 5     # on a GPU box

For each reader count (1, 2, 4, 8, 16), ``--runs`` warm loads of ``ring threads=T`` in this process
(every one verified byte for byte), interleaved T by T, beside the same file read by T threads with
nothing else (the page-cache wall of this run). Per load: GB/s, the process's CPU time over the wall
(threads that run at once push it above 1; threads taking turns on the GIL keep it at 1 or below),
and the share of the wall the readers held the GIL: windows × the Python time of one window, measured
first with a device whose calls return at once (a calibration, so an upper bound: it includes the
4 KiB pread of that loop). Prints Markdown.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402
from workbench.io.pagecache import prepare  # noqa: E402
from workbench.measure.run.verify import verify_placements  # noqa: E402
from workbench.strategies import get_strategy  # noqa: E402
from workbench.strategies.base import free_placements  # noqa: E402
from workbench.upload import open_device  # noqa: E402

MiB = 1 << 20


class _NullCuda:
    """cuda-python's call shapes with nothing behind them: every call succeeds at once."""

    class cudaError_t:  # noqa: N801 - the binding's names
        cudaSuccess = 0

    class cudaMemcpyKind:  # noqa: N801
        cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost = 1, 2

    cudaHostRegisterDefault = cudaHostRegisterReadOnly = cudaHostAllocDefault = 0

    def __getattr__(self, name: str):  # noqa: ANN204
        value = {"cudaGetDeviceCount": 1, "cudaMalloc": 1 << 40}.get(name, object())
        return lambda *args: (0, value)


def python_us_per_window(windows: int = 5000) -> float:
    """µs of Python (GIL held) per ring window: the reader loop over the GPU backend with a binding
    that returns at once (real cuda-python calls add their own argument conversion on top)."""
    from workbench.formats import open_index
    from workbench.strategies.ring_plan import Piece, Window
    from workbench.strategies.ring_readers import Readers
    from workbench.upload.cuda import CudaDevice
    from workbench.upload.staging import StagingRing

    device = CudaDevice(0, module=_NullCuda())

    class Ctx:
        def count(self, *args: object) -> None:
            return None

    class NoEvict:
        def drop(self, *args: object) -> None:
            return None

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f".wb-gil-{os.getpid()}.safetensors"
    write_synthetic(path, format="safetensors", layout="dense", size=1 << 20, dtype="bf16", seed=1)
    ring = StagingRing(device, 2, 4096, source="anon")
    try:
        ctx = Ctx()
        ctx.device, ctx.index = device, open_index(path)  # a real index: readers open files checked against it
        t = ctx.index.tensors[0]
        lo = t.offset - t.offset % 4096
        n = min(t.nbytes, lo + 4096 - t.offset)
        work = [Window(t.file, lo, lo + 4096, (Piece(0, 0, t.offset - lo, n),))] * windows
        t0 = time.thread_time()
        Readers(ctx, ring, [device.alloc(t.nbytes)], NoEvict()).run(work, threading.Event())
        return (time.thread_time() - t0) / windows * 1e6
    finally:
        ring.close()
        path.unlink()


def read_wall(path: str, threads: int, chunk: int = 16 * MiB) -> float:
    """GB/s of ``threads`` readers preading the resident file, one contiguous share each."""
    size = os.path.getsize(path)
    share = -(-size // threads // chunk) * chunk

    def read(lo: int, hi: int) -> None:
        fd, buf = os.open(path, os.O_RDONLY), bytearray(chunk)
        try:
            for off in range(lo, hi, chunk):
                os.preadv(fd, [memoryview(buf)[: min(chunk, hi - off)]], off)
        finally:
            os.close(fd)
    workers = [threading.Thread(target=read, args=(lo, min(size, lo + share))) for lo in range(0, size, share)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return size / (time.perf_counter() - t0) / 1e9


def one_load(index, device: str, threads: int, slot_mib: int) -> dict[str, float]:  # noqa: ANN001
    dev = open_device(device)
    try:
        strategy = get_strategy("ring")(threads=threads, slot_mib=slot_mib, gate=0.0)
        c0 = time.process_time()
        result = strategy.load(index, dev)
        cpu = time.process_time() - c0
        ok = verify_placements(index, dev, result.placements).ok
        free_placements(dev, result)
    finally:
        dev.close()
    if not ok:
        raise SystemExit(f"ring threads={threads}: wrong bytes on the device")
    windows = -(-result.bytes_moved // (slot_mib * MiB))
    return {"gbps": result.gbps, "cpu_per_wall": cpu / result.load_s, "load_s": result.load_s, "windows": windows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--dir", default="data/models/bench")
    ap.add_argument("--size", default="512MiB")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--slot-mib", type=int, default=4)
    args = ap.parse_args(argv)
    counts = [int(t) for t in args.threads.split(",")]
    path = Path(args.dir) / f"threads-bf16-{parse_size(args.size) >> 20}MiB.safetensors"
    if not path.exists():
        write_synthetic(path, format="safetensors", layout="dense", size=parse_size(args.size), dtype="bf16", seed=5)
    from workbench.formats import open_index

    index = open_index(path)
    prepare(str(path), "warm")
    per_window = python_us_per_window()
    args.load_before = os.getloadavg()[0]
    samples: dict[int, list[dict[str, float]]] = {t: [] for t in counts}
    walls: dict[int, list[float]] = {t: [] for t in counts}
    for _ in range(args.runs):
        for t in counts:
            walls[t].append(read_wall(str(path), t))
            samples[t].append(one_load(index, args.device, t, args.slot_mib))
    args.load_after = os.getloadavg()[0]
    print(report(args, index, counts, samples, walls, per_window))
    return 0


def report(args, index, counts, samples, walls, per_window: float) -> str:  # noqa: ANN001
    med = lambda xs: statistics.median(xs)  # noqa: E731
    cores = len(os.sched_getaffinity(0))
    lines = [f"`ring` on `{args.device}`, {index.nbytes / 1e9:.2f} GB bf16 file, warm, {args.slot_mib} MiB windows, "
             f"{args.runs} loads per reader count (interleaved, each verified), {cores} cores, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {args.load_before:.1f} before, "
             f"{args.load_after:.1f} after; Python per window (GIL held, calibration): {per_window:.1f} µs", "",
             "| readers | ring GB/s median (min–max) | × 1 reader | page-cache read, same readers (GB/s) | ring / read "
             "| CPU ÷ wall | GIL held (share of the wall, est.) |", "|---|---|---|---|---|---|---|"]
    base = med([s["gbps"] for s in samples[counts[0]]])
    for t in counts:
        g = [s["gbps"] for s in samples[t]]
        held = med([s["windows"] * per_window / 1e6 / s["load_s"] for s in samples[t]])
        lines.append(f"| {t} | {med(g):.2f} ({min(g):.2f}–{max(g):.2f}) | {med(g) / base:.2f} | {med(walls[t]):.2f} | "
                     f"{med(g) / med(walls[t]):.0%} | {med([s['cpu_per_wall'] for s in samples[t]]):.2f} | {held:.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
