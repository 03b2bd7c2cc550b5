"""What a load's staging costs, piece by piece, in one fresh process (issue 25): the floor under a
small load's fixed part, measured before choosing a staging plan.

    python3 benchmarks/probe/probe_staging.py --device cuda --file MODEL [--out probe.json]

Each line times one thing, best of ``--repeat`` (fresh memory each time):

* first touch of anonymous memory (huge pages advised, MADV_POPULATE_WRITE), by 1, 4 and 16 threads
  together (each its own part): does provisioning scale with threads on this machine?
* registering memory already touched (``register_host``), per MiB; and each of a load's first twelve
  6 MiB slots in turn, alone and while eight threads pread the warm file (``register_each_*``);
* the copy engine's rate for 256 MiB in different shapes: one copy, 8 MiB copies, 8 MiB copies split in
  two at an odd edge, 8 MiB copies from 20 registered slots (``copy_shapes``);
* a pread from the warm page cache into fresh memory vs into touched memory, 16 threads: is the
  first touch inside the reads parallel?
* registering a read-only mapping of the warm model file (4 KiB page-cache pages) in 8 MiB pieces by 1
  and by 8 threads, and the host→device copy out of it (the stretch: DMA straight from the page cache).

Prints one JSON object (and writes it to ``--out``): ms per case and MiB/ms where it applies.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.upload import open_device  # noqa: E402
from workbench.upload.pinned import HUGE_PAGE, MADV_POPULATE_WRITE  # noqa: E402

MiB = 1 << 20


def parallel(n: int, work: Callable[[int], None]) -> float:
    """Seconds for ``n`` threads running ``work(k)`` together."""
    barrier = threading.Barrier(n + 1)
    threads = [threading.Thread(target=lambda k=k: (barrier.wait(), work(k))) for k in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def fresh(nbytes: int) -> tuple[mmap.mmap, memoryview]:
    m = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    import numpy as np

    addr = np.frombuffer(m, dtype=np.uint8).ctypes.data
    start = -addr % HUGE_PAGE
    try:
        m.madvise(mmap.MADV_HUGEPAGE, start, nbytes)
    except (OSError, AttributeError):
        pass
    return m, memoryview(m)[start : start + nbytes]


def touch(m_view: tuple[mmap.mmap, memoryview]) -> None:
    m, view = m_view
    import numpy as np

    start = np.frombuffer(view, dtype=np.uint8).ctypes.data - np.frombuffer(m, dtype=np.uint8).ctypes.data
    m.madvise(MADV_POPULATE_WRITE, start, len(view))


def touch_case(total: int, threads: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        parts = [fresh(total // threads) for _ in range(threads)]
        best = min(best, parallel(threads, lambda k: touch(parts[k])))
        for m, v in parts:
            v.release()
            m.close()
    return best


def register_case(device: Any, nbytes: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        m, v = fresh(nbytes)
        touch((m, v))
        t0 = time.perf_counter()
        h = device.register_host(v)
        best = min(best, time.perf_counter() - t0)
        device.unregister_host(h)
        v.release()
        m.close()
    return best


def pread_case(path: str, each: int, threads: int, touched: bool, repeat: int) -> float:
    best = float("inf")
    size = os.path.getsize(path)
    for r in range(repeat):
        parts = [fresh(each) for _ in range(threads)]
        if touched:
            for p in parts:
                touch(p)
        fds = [os.open(path, os.O_RDONLY) for _ in range(threads)]
        def work(k: int) -> None:
            off = ((k + r * threads) * each) % max(size - each, 1) // 4096 * 4096
            os.preadv(fds[k], [parts[k][1]], off)
        best = min(best, parallel(threads, work))
        for fd in fds:
            os.close(fd)
        for m, v in parts:
            v.release()
            m.close()
    return best


def register_each(device: Any, nbytes: int, count: int, path: str | None = None, readers: int = 8) -> list[float]:
    """ms to register each of ``count`` touched ``nbytes`` slots in turn (the first ones of the process
    first); with ``path``, while ``readers`` threads pread the warm file in 8 MiB pieces the whole time —
    a staged load's slots are registered while its readers read."""
    slots = [fresh(nbytes) for _ in range(count)]
    for p in slots:
        touch(p)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    if path is not None:
        size = os.path.getsize(path)

        def read(k: int) -> None:
            fd, buf, off = os.open(path, os.O_RDONLY), bytearray(8 * MiB), k * 8 * MiB
            while not stop.is_set():
                off = off + 8 * MiB if off + 16 * MiB <= size else 0
                os.preadv(fd, [buf], off)
            os.close(fd)
        threads = [threading.Thread(target=read, args=(k,), daemon=True) for k in range(readers)]
        for t in threads:
            t.start()
        time.sleep(0.05)
    took, handles = [], []
    for m, v in slots:
        t0 = time.perf_counter()
        handles.append(device.register_host(v))
        took.append(round((time.perf_counter() - t0) * 1e3, 3))
    stop.set()
    for t in threads:
        t.join()
    for h, (m, v) in zip(handles, slots):
        device.unregister_host(h)
        v.release()
        m.close()
    return took


@contextmanager
def registered_slots(device: Any, slots: int, piece: int) -> Iterator[list[tuple[mmap.mmap, memoryview]]]:
    """``slots`` touched huge-page slots of ``piece`` bytes registered with ``device``, as a ring's are;
    every copy done, unregistered and unmapped on the way out."""
    ring = [fresh(piece) for _ in range(slots)]
    for p in ring:
        touch(p)
    handles = [device.register_host(v) for _, v in ring]
    try:
        yield ring
    finally:
        device.synchronize()
        for h, (m, v) in zip(handles, ring):
            device.unregister_host(h)
            v.release()
            m.close()


def copy_shapes(device: Any, total: int = 256 * MiB, piece: int = 8 * MiB, slots: int = 20) -> dict[str, float]:
    """GB/s of the copy engine for one load's worth of bytes in different shapes (issue 25's 16 GB load
    kept it busy only ~86 % of the stream): one copy out of one page-locked buffer; ``piece``-sized copies
    out of it; each piece split in two at an odd edge (a tensor ending inside a window); and piece-sized
    copies cycling through ``slots`` separately registered huge-page slots, as the ring's are."""
    out: dict[str, float] = {}
    dst = device.alloc(total)
    staging = device.alloc_pinned(total)
    try:
        def timed(name: str, issue: Callable[[], None]) -> None:
            device.synchronize()
            t0 = time.perf_counter()
            issue()
            device.synchronize()
            out[name] = round(total / (time.perf_counter() - t0) / 1e9, 2)

        view = staging.view
        view[:] = b"\x01" * total  # every page of both touched before anything is timed
        device.copy_h2d(dst, 0, view)
        timed("one_copy_gbps", lambda: device.copy_h2d(dst, 0, view, asynchronous=True))
        timed(f"copies_of_{piece // MiB}MiB_gbps", lambda: [device.copy_h2d(dst, o, view[o : o + piece], asynchronous=True)
                                                           for o in range(0, total, piece)])
        edge = piece - 12345

        def split() -> None:
            for o in range(0, total, piece):
                device.copy_h2d(dst, o, view[o : o + edge], asynchronous=True)
                device.copy_h2d(dst, o + edge, view[o + edge : o + piece], asynchronous=True)
        timed(f"copies_of_{piece // MiB}MiB_split_in_two_gbps", split)
        with registered_slots(device, slots, piece) as ring:
            timed(f"copies_from_{slots}_registered_slots_gbps",
                  lambda: [device.copy_h2d(dst, o, ring[(o // piece) % slots][1], asynchronous=True)
                           for o in range(0, total, piece)])
    finally:
        device.synchronize()
        device.free_pinned(staging)
        device.free(dst)
    return out


def pagecache_case(device: Any, path: str, nbytes: int, threads: int) -> dict[str, float]:
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, nbytes, access=mmap.ACCESS_READ)
    view = memoryview(m)
    piece = 8 * MiB
    chunks = [view[o : o + piece] for o in range(0, nbytes, piece)]
    handles: list[Any] = [None] * len(chunks)
    def work(k: int) -> None:
        for i in range(k, len(chunks), threads):
            handles[i] = device.register_host(chunks[i])
    reg = parallel(threads, work)
    ok = sum(h is not None for h in handles)
    dst = device.alloc(nbytes)
    copy = float("nan")
    if ok == len(chunks):
        device.synchronize()
        t0 = time.perf_counter()
        for i, c in enumerate(chunks):
            device.copy_h2d(dst, i * piece, c, asynchronous=True)
        device.synchronize()
        copy = time.perf_counter() - t0
    t0 = time.perf_counter()
    for h in handles:
        device.unregister_host(h)
    unreg = time.perf_counter() - t0
    device.free(dst)
    for c in chunks:
        c.release()
    view.release()
    m.close()
    os.close(fd)
    return {"register_ms": reg * 1e3, "registered": ok, "pieces": len(chunks), "copy_ms": copy * 1e3,
            "unregister_ms": unreg * 1e3, "mib": nbytes / MiB}


def probe_args(doc: str) -> argparse.ArgumentParser:
    """The options every probe takes (``--device``, ``--file``, ``--repeat``, ``--out``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--file", required=True, help="a model file, read warm (it is read once first)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    return ap


def start(args: argparse.Namespace, **more: Any) -> dict[str, Any]:
    """The result's header (device, file, date, cores, ``more``), once ``args.file`` is read warm."""
    with open(args.file, "rb") as fh:
        while fh.read(64 * MiB):
            pass
    return {"device": args.device, "file": args.file, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "cores": len(os.sched_getaffinity(0)), **more}


def finish(out: dict[str, Any], path: str | None) -> int:
    """Print the result as JSON and write it to ``path`` (when given)."""
    text = json.dumps(out, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__).parse_args(argv)
    out = start(args)
    with open_device(args.device) as device:
        device.info()
        # first: the process's first registrations (a staged load's slots), alone, then under 8 readers
        out["register_each_12x6MiB_ms"] = register_each(device, 6 * MiB, 12)
        out["register_each_12x6MiB_under_8_readers_ms"] = register_each(device, 6 * MiB, 12, args.file)
        for total in (16 * MiB, 64 * MiB):
            for threads in (1, 4, 16):
                s = touch_case(total, threads, args.repeat)
                out[f"touch_{total // MiB}MiB_{threads}t_ms"] = round(s * 1e3, 3)
        for nbytes in (2 * MiB, 16 * MiB, 64 * MiB):
            out[f"register_touched_{nbytes // MiB}MiB_ms"] = round(register_case(device, nbytes, args.repeat) * 1e3, 3)
        out["copy_shapes"] = copy_shapes(device)
        for touched in (False, True):
            s = pread_case(args.file, 8 * MiB, 16, touched, args.repeat)
            out[f"pread_16x8MiB_{'touched' if touched else 'fresh'}_ms"] = round(s * 1e3, 3)
        size = min(os.path.getsize(args.file) // (8 * MiB) * 8 * MiB, 256 * MiB)
        for threads in (1, 8):
            try:
                out[f"pagecache_register_{threads}t"] = pagecache_case(device, args.file, size, threads)
            except Exception as exc:  # noqa: BLE001 - a refusal is a result
                out[f"pagecache_register_{threads}t"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return finish(out, args.out)


if __name__ == "__main__":
    sys.exit(main())
