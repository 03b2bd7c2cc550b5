"""What each attempt's runs did, from a ledger — the proof lines for a peer comparison:

    python benchmarks/figures/peers_report.py LEDGER.sqlite [--campaign NAME]

One line per attempt: kind (strategy or peer), label, cache state, runs verified / runs, median GB/s, the pre-window
hook's time (``prepare_s``: library import, torch's CUDA context), modules still imported inside the
window (should be none), the load path that picked the wall (readers, copy source, O_DIRECT), and what
engaged (the library, version, I/O mode it reported, and whether its tensors were adopted).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.ledger import Ledger  # noqa: E402
from workbench.ledger.export import strategy_kind  # noqa: E402


def attempt_lines(ledger: Ledger, campaign: str | None = None) -> list[str]:
    lines = []
    for a in ledger.attempts(campaign).to_dict("records"):
        runs = ledger.run_records(a["id"])
        reports = [r.report for r in runs if r.ok]
        verified = sum(r.verified is True for r in runs)
        gbps = [r.bytes / r.load_s / 1e9 for r in runs if r.ok and r.load_s]
        prepare = [t.prepare_s for t in (rep.timings for rep in reports) if t and t.prepare_s is not None]
        imports = sorted({m for rep in reports if rep.timings for m in rep.timings.window_imports})
        load = reports[0].load if reports else None
        path = f"readers={load.path.readers} from={load.path.copy_from} direct={load.path.direct}" if load else "-"
        engaged = "; ".join(str(e) for e in load.engaged) if load else (runs[0].error if runs else "no runs")
        lines.append(
            f"{strategy_kind(a):<8} {a['label']:<40} {a['cache']:<5} verified {verified}/{len(runs)}  "
            f"{statistics.median(gbps) if gbps else float('nan'):6.2f} GB/s  "
            f"prepare {statistics.median(prepare) if prepare else float('nan'):.2f} s  "
            f"window imports {imports or 'none'}  {path}  | {engaged}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ledger", type=Path)
    parser.add_argument("--campaign", default=None)
    args = parser.parse_args(argv)
    with Ledger(args.ledger) as ledger:
        print("\n".join(attempt_lines(ledger, args.campaign)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
