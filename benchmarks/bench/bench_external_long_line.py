"""How long external mode records for an engine that prints one very long line before its marker.

An engine that writes N bytes with no newline, then its marker line, then waits: the load window
`workbench external` records should be the engine's start-up plus the time to move N bytes through the
pseudo-terminal, not a cost that grows with N² in the reader (issue 19, class 7). Prints one row per
size: the median of --runs recorded windows (ms), and how many runs timed out.

    python benchmarks/bench/bench_external_long_line.py --sizes 0 1MB 20MB --runs 5 --timeout 60
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ENGINE = """
import os, sys, time
n = int(sys.argv[1])
chunk = b"x" * 65536
left = n
while left > 0:  # one long line, no newline, written as a real engine's log would be
    left -= os.write(1, chunk[:left])
os.write(1, b"\\nengine ready\\n")
time.sleep(60)
"""


def parse_size(text: str) -> int:
    units = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
    for unit, scale in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def main() -> None:
    from workbench.measure.engine.external import time_external

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["0", "1MB", "20MB"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = Path(tmp) / "engine.py"
        engine.write_text(ENGINE)
        print("| line | median recorded window (ms) | min–max (ms) | timed out |")
        print("|---|---|---|---|")
        for text in args.sizes:
            size = parse_size(text)
            windows, timeouts = [], 0
            for _ in range(args.runs):
                out = time_external(f"{sys.executable} {engine} {size}", "engine ready", timeout_s=args.timeout)
                if out.load_s is None:
                    timeouts += 1
                else:
                    windows.append(out.load_s * 1000)
            if windows:
                row = f"{statistics.median(windows):.0f} | {min(windows):.0f}–{max(windows):.0f}"
            else:
                row = "— | —"
            print(f"| {text} | {row} | {timeouts}/{args.runs} |", flush=True)


if __name__ == "__main__":
    main()
