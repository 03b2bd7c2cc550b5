"""Per-cell table and release on/off ratios of a session-pressure A/B, from a ledger export's CSVs.

    python benchmarks/figures/session_pressure_table.py docs/benchmarks/h200-2026-12-03/session-pressure/session-pressure

Reads ``attempts.csv`` and ``turns.csv`` (``workbench ledger export``) with pandas; one row per cell of the
``bench-session-*-pressure-*`` campaigns (the unlimited probe first): turns after turn 0, the cell's tok/s
over them (what an A/B's effects compare), its major faults after turn 0 (all on its own files: a session
never maps the model), the last unreleased pages, ``compute_s`` after turn 0, how the cell ended, and the
outcome kind the balloon rule (:data:`workbench.measure.session.pressure.OWN_FAULTS_PER_TURN`) gives its turns.
Then the release on/off tok/s ratio per round where both arms have turns after turn 0, and the effect
(:func:`workbench.measure.run.effect.ratio_effect`, release on over off, the ratio of medians with its interval).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workbench.expert.session_records import TurnRecord  # noqa: E402
from workbench.measure.run.effect import ratio_effect  # noqa: E402
from workbench.measure.session.pressure import MemoryLimit, MemoryPressure  # noqa: E402
from workbench.measure.session.runner import _outcome, outcome_kind  # noqa: E402
from workbench.records import format_effect  # noqa: E402


def cells(directory: Path) -> pd.DataFrame:
    attempts = pd.read_csv(directory / "attempts.csv")
    turns = pd.read_csv(directory / "turns.csv")
    attempts = attempts[attempts["campaign"].str.contains("pressure")].sort_values("created")
    balloon = MemoryPressure(1, "balloon")
    balloon.limit = MemoryLimit("balloon", 1 << 20)
    rows = []
    for n, a in enumerate(attempts.itertuples()):
        mine = turns[turns["attempt_id"] == a.id].sort_values("turn")
        records = [TurnRecord.from_json({**json.loads(t.extra), **t._asdict()}) for t in mine.itertuples()]
        after = records[1:]
        arm = re.match(r"(boundary-release=\w+|probe release=\w+)", a.label).group(1)
        rnd = re.search(r"round (\d+)", a.label)
        limited = "memory_limit_mib" in json.loads(a.params)
        ended = "finished" if a.verdict != "failed" else str(a.notes).split(";")[0][:60]
        rows.append({
            "cell": n, "attempt": a.id[:8], "arm": arm, "round": int(rnd.group(1)) if rnd else 0,
            "turns after turn 0": len(after),
            "tok/s": sum(t.tokens for t in after) / sum(t.seconds for t in after) if after else float("nan"),
            "majflt after turn 0": sum(t.majflt for t in after), "majflt turn 0": records[0].majflt if records else 0,
            "unreleased pages (last)": records[-1].unreleased_pages if records else 0,
            "compute_s after turn 0": sum(t.compute_s for t in after),
            "compute_s turn 0": records[0].compute_s if records else float("nan"),
            "ended": ended,
            "kind (the balloon rule)": outcome_kind(_outcome(balloon, 0, records)) if limited and records else "—",
        })
    return pd.DataFrame(rows)


def ratios(table: pd.DataFrame) -> tuple[list[tuple[int, float, float]], str]:
    """(round, on tok/s, off tok/s) of each round where both arms have turns after turn 0, and the effect."""
    ab = table[table["arm"].str.startswith("boundary-release") & (table["turns after turn 0"] > 0)]
    on = ab[ab["arm"] == "boundary-release=on"].set_index("round")["tok/s"]
    off = ab[ab["arm"] == "boundary-release=off"].set_index("round")["tok/s"]
    rounds = sorted(set(on.index) & set(off.index))
    pairs = [(r, float(on[r]), float(off[r])) for r in rounds]
    e = ratio_effect([p[1] for p in pairs], [p[2] for p in pairs], paired=True)  # on over off, as ratio_effect reads it
    effect = (f"{format_effect(e.speedup, e.ci_low, e.ci_high)} ({e.verdict}: {e.reason}; {e.method}, "
              f"n = {len(pairs)})")
    return pairs, effect


def markdown(table: pd.DataFrame) -> str:
    """A Markdown table (no tabulate needed): floats to 3 significant figures, counts with separators."""
    def cell(v: object) -> str:
        if isinstance(v, float):
            return "—" if v != v else f"{v:.3g}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    head = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "---|" * len(table.columns)
    return "\n".join([head, rule, *("| " + " | ".join(cell(v) for v in row) + " |"
                                     for row in table.itertuples(index=False))])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="a folder holding the export's attempts.csv and turns.csv")
    directory = parser.parse_args(argv).export
    missing = [name for name in ("attempts.csv", "turns.csv") if not (directory / name).is_file()]
    if missing:
        print(f"session_pressure_table: {directory}: no {' or '.join(missing)} there "
              "(export the ledger with `workbench ledger export`)", file=sys.stderr)
        return 2
    table = cells(directory)
    print(markdown(table))
    pairs, effect = ratios(table)
    print()
    for r, a, b in pairs:
        print(f"round {r}: on {a:.2f} / off {b:.2f} tok/s = {a / b:.2f}")
    print(f"release on over off, tok/s after turn 0: {effect}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
