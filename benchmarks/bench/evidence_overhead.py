"""What recording the evidence costs the engine it times: the same engine's load window with the
kernel's event record on and off, interleaved, as a ratio of medians with its interval.

    python benchmarks/bench/evidence_overhead.py [--size-mib 256] [--runs 8]

Two engines on one warm file of ``--size-mib``: ``read`` (1 MiB read calls: one tracepoint record per
page-cache batch) and ``mapped`` (the file mapped and copied: a page-fault record per fault). Each run is
``time_external`` with a start marker (after the interpreter's start) and an end marker; "off" is the
sampled fallback (the event record refused as if the kernel had none). Prints machine, date, n and, per
engine, on/off medians and their ratio on/off as ``1.00× [lo–hi]`` (> 1: the record slows the engine).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.io.fileevents import EventsUnavailable, recorder  # noqa: E402
from workbench.io.pagecache import prepare  # noqa: E402
from workbench.measure.engine.command import EngineCommand  # noqa: E402
from workbench.measure.engine.external import time_external  # noqa: E402
from workbench.measure.engine.target import ReadTarget  # noqa: E402
from workbench.measure.run.effect import ratio_effect  # noqa: E402

ENGINES = {
    "read": "fd = os.open(P, os.O_RDONLY)\nwhile os.read(fd, 1 << 20): pass",
    "mapped": "import mmap\nfh = open(P, 'rb'); m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ); bytes(m)",
}


def one(code: str, path: str, target: ReadTarget, events: bool) -> float:
    real = recorder.FileEventRecorder.open

    def refuse(*_a, **_k):
        raise EventsUnavailable("off for the A/B")

    recorder.FileEventRecorder.open = real if events else refuse  # type: ignore[method-assign]
    try:
        prepare(path, "warm")
        body = f"import os, time\nP = {path!r}\nprint('start', flush=True)\n{code}\nprint('loaded', flush=True)\ntime.sleep(30)"
        out = time_external(EngineCommand(f"{shlex.quote(sys.executable)} -c {shlex.quote(body)}", "loaded",
                                          start_marker="start"), timeout_s=60, nbytes=target.nbytes, model=target)
    finally:
        recorder.FileEventRecorder.open = real  # type: ignore[method-assign]
    assert out.error is None and out.load_s is not None, out.error
    grade = out.report.external.evidence.grade
    assert (grade in ("bytes-read", "mapping-touched")) if events else True, out.report.external.evidence.describe()
    return out.load_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="evidence-overhead-") as tmp:
        path = os.path.join(tmp, "model.bin")
        with open(path, "wb") as fh:
            for _ in range(args.size_mib):
                fh.write(os.urandom(1 << 20))
        target = ReadTarget.from_paths("model.bin", (path,), args.size_mib << 20)
        print(f"{platform.node()}, Linux {platform.release()}, {os.cpu_count()} cores, "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {args.size_mib} MiB warm, "
              f"n = {args.runs} a side, interleaved on/off/off/on")
        for name, code in ENGINES.items():
            on, off = [], []
            for k in range(args.runs):
                order = (True, False) if k % 2 == 0 else (False, True)
                for events in order:
                    (on if events else off).append(one(code, path, target, events))
            effect = ratio_effect(on, off, paired=True)
            print(f"{name:7s} on {statistics.median(on) * 1e3:7.1f} ms  off {statistics.median(off) * 1e3:7.1f} ms  "
                  f"on/off {effect}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
