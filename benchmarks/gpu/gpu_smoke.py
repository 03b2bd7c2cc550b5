"""GPU smoke test and H2D numbers: every copy path of a device backend, byte-checked, as JSON lines.

Needs only numpy and the backend's binding (cuda-python for ``cuda``)::

    python benchmarks/gpu/gpu_smoke.py                      # cuda, sizes 1 B, 4097 B, 64 MiB, 1 GiB
    python benchmarks/gpu/gpu_smoke.py --device host --sizes 1,4097,1Mi

Paths: ``pageable`` (heap array, synchronous copy), ``mmap`` (a read-only mmap'd file slice at an
unaligned offset, page cache warm), ``pinned-async`` (runtime-allocated pinned staging, async copy),
``registered`` (host-registered heap array, async copy) and ``registered-mmap`` (the mmap slice
registered read-only). Each path copies data no other path copies, then reads it back and compares, so
a path that copied nothing cannot pass on an earlier path's bytes. Timed: copy + synchronize, median of
``--reps``; registration is timed separately. Exit 1 if any path failed or differed.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.upload import open_device  # noqa: E402

UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
FILE_OFFSET = 123  # tensor offsets in GGUF files sit off page boundaries
PATHS = ("pageable", "mmap", "pinned-async", "registered", "registered-mmap")


def parse_size(text: str) -> int:
    """"4097" → 4097, "64Mi" → 67108864."""
    for unit in ("Ki", "Mi", "Gi"):
        if text.endswith(unit):
            return int(text[: -len(unit)]) * UNITS[unit]
    return int(text)


def emit(**record: Any) -> None:
    print(json.dumps(record), flush=True)


def timed(run: Callable[[], None], reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return samples


def path_data(base: np.ndarray, path: str, nbytes: int) -> np.ndarray:
    """Bytes unique to this path (the base pattern XOR a per-path byte)."""
    return np.bitwise_xor(base[:nbytes], np.uint8(0x11 * (PATHS.index(path) + 1)))


def copy_path(dev: Any, path: str, buf: Any, src: Any, reps: int) -> list[float]:
    """Time ``reps`` copies of ``src`` into ``buf`` on one path; returns seconds per copy."""
    asynchronous = path in ("pinned-async", "registered", "registered-mmap")

    def run() -> None:
        dev.copy_h2d(buf, 0, src, asynchronous=asynchronous)
        dev.synchronize()
    return timed(run, reps)


def run_path(dev: Any, path: str, nbytes: int, base: np.ndarray, mapped: mmap.mmap, reps: int) -> dict:
    """One path at one size: set up the source, copy, verify; the JSON record."""
    record: dict[str, Any] = {"kind": "copy", "path": path, "size": nbytes}
    buf, cleanup = dev.alloc(nbytes), []
    try:
        if path in ("mmap", "registered-mmap"):
            view = memoryview(mapped)[FILE_OFFSET : FILE_OFFSET + nbytes]
            cleanup.append(view.release)
            expected = path_data(base, "mmap", nbytes)  # what the file holds
            src = view
        else:
            expected = src = path_data(base, path, nbytes)
        if path == "pinned-async":
            staging = dev.alloc_pinned(nbytes)
            cleanup.insert(0, lambda: dev.free_pinned(staging))
            np.frombuffer(staging.view, dtype=np.uint8)[:] = expected
            src = staging.view
        if path.startswith("registered"):
            start = time.perf_counter()
            handle = dev.register_host(src)
            record["register_s"] = time.perf_counter() - start
            cleanup.insert(0, lambda: dev.unregister_host(handle))
        samples = copy_path(dev, path, buf, src, reps)
        got = np.frombuffer(dev.read_back(buf, 0, nbytes), dtype=np.uint8)
        record["verified"] = bool(np.array_equal(got, expected))
        median = statistics.median(samples)
        record.update(reps=reps, median_s=median, min_s=min(samples), max_s=max(samples),
                      gbps=nbytes / median / 1e9, gbps_best=nbytes / min(samples) / 1e9)
    finally:
        for step in cleanup:
            step()
        dev.free(buf)
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="backend spec: cuda, cuda:1, hip, host, ...")
    ap.add_argument("--sizes", default="1,4097,64Mi,1Gi", help="comma list; Ki/Mi/Gi suffixes")
    ap.add_argument("--reps", type=int, default=5, help="timed copies per path and size (3 at >= 1 GiB)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the mmap source file goes")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    biggest = max(sizes)
    base = np.frombuffer(np.random.default_rng(617).bytes(biggest), dtype=np.uint8)
    failures = 0
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    with open_device(args.device) as dev, tempfile.NamedTemporaryFile(dir=args.dir, suffix=".bin") as f:
        emit(kind="device", spec=args.device, **dev.info().to_json())
        f.write(b"\0" * FILE_OFFSET)
        f.write(path_data(base, "mmap", biggest).tobytes())
        f.flush()
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        emit(kind="file", path=f.name, size=os.fstat(f.fileno()).st_size, cache="warm (just written)")
        try:
            for nbytes in sizes:
                for path in PATHS:
                    reps = min(args.reps, 3) if nbytes >= 1 << 30 else args.reps
                    try:
                        rec = run_path(dev, path, nbytes, base, mapped, reps)
                    except Exception as exc:  # report and go on: one broken path must not hide the rest
                        rec = {"kind": "error", "path": path, "size": nbytes,
                               "error": f"{type(exc).__name__}: {exc}"}
                    failures += not rec.get("verified", False)
                    emit(**rec)
        finally:
            mapped.close()
    emit(kind="summary", ok=failures == 0, failures=failures, paths=len(PATHS) * len(sizes))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except WorkbenchError as exc:  # e.g. the backend is unavailable here: one line, not a traceback
        emit(kind="error", error=str(exc))
        sys.exit(2)
