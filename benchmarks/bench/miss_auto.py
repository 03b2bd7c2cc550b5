"""Where ``--miss auto`` lands against the better fixed way of the same A/B (issue 34 §4: within 5 %).

    workbench session MODEL ... --ab miss=fetch --ab miss=host --ab miss=auto --rounds 6 --json > ab.json
    python benchmarks/bench/miss_auto.py ab.json

The better fixed way is the arm (``miss=fetch`` or ``miss=host``) with the higher median tok/s; auto's tok/s
over it is the ratio of medians with its 95 % interval, paired by round (the A/B's own bootstrap), and the
goal's verdict: **met** where the interval's low end is at least 0.95, **not met** where its high end is
below 0.95, else neither shown nor refuted at this n. ``bench_miss.py`` prints the same lines under its
``miss`` group. Also auto's share of tokens probing the other way, from the cells' summaries.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not

from workbench.measure.run.effect import ratio_effect  # noqa: E402
from workbench.records import format_effect  # noqa: E402

GOAL = 0.95


def _cells_of(result: Any) -> list[tuple[str, int, dict[str, float], dict[str, Any]]]:
    """(arm label, round, figures, summary) per finished cell, from an A/B result or its ``--json`` document."""
    if isinstance(result, dict):
        labels = [a["label"] for a in result["arms"]]
        return [(labels[c["arm"]], c["round"], c["figures"], c.get("summary") or {})
                for c in result["cells"] if c.get("figures")]
    return [(result.arms[i].label, rnd, f, c.report.summary.to_json() if c.report else {})
            for (i, rnd, c), f in zip(result.cells, result.figures) if f]


def miss_way(label: str) -> tuple[str, str]:
    """An arm's ``miss=`` way (fetch where it names none) and the rest of its settings, in a fixed order:
    ``placement=pool miss=auto`` -> ("auto", "placement=pool")."""
    way, rest = "fetch", []
    for token in label.split():
        if token.startswith("miss="):
            way = token.partition("=")[2]
        else:
            rest.append(token)
    return way, " ".join(sorted(rest))


def auto_against_best(result: Any) -> list[str]:
    """Markdown lines: auto's tok/s over the better fixed arm's (an arm differing from auto's in its
    ``miss=`` alone), the goal's verdict, the probes."""
    cells = _cells_of(result)
    by: dict[str, dict[int, float]] = {}
    for label, rnd, f, _ in cells:
        by.setdefault(label, {})[rnd] = f["tok/s"]
    autos = [lab for lab in by if miss_way(lab)[0] == "auto"]
    fixed = [lab for lab in by if autos and miss_way(lab) in {("fetch", miss_way(autos[0])[1]),
                                                               ("host", miss_way(autos[0])[1])}]
    if not autos or not fixed:
        return ["", "No `miss=auto` arm beside a fixed one (the same settings but miss=fetch or miss=host): "
                    "nothing to place auto against."]
    best, candidate = max(fixed, key=lambda lab: statistics.median(by[lab].values())), autos[0]
    rounds = sorted(set(by[best]) & set(by[candidate]))
    auto, base = [by[candidate][r] for r in rounds], [by[best][r] for r in rounds]
    e = ratio_effect(auto, base, paired=True)  # tok/s: the candidate's median over the baseline's
    if e.speedup is None:
        return ["", f"auto against {best}: no ratio ({e.reason})."]
    ratio = format_effect(e.speedup, e.ci_low, e.ci_high)
    if e.ci_low is not None and e.ci_low >= GOAL:
        verdict = "met: the interval's low end is at least 0.95"
    elif e.ci_high is not None and e.ci_high < GOAL:
        verdict = "NOT met: the interval lies below 0.95"
    else:
        verdict = "neither shown nor refuted at this n: the interval spans 0.95"
    return ["", f"- **auto over the better fixed way ({best})**, tok/s: {ratio}, n = {len(rounds)} "
                f"(paired rounds): within 5 % {verdict}.", *_probes(cells)]


def _probes(cells: Iterable[tuple[str, int, dict[str, float], dict[str, Any]]]) -> list[str]:
    shares = []
    for label, _, _, s in cells:
        if miss_way(label)[0] == "auto" and s.get("miss_probe_tokens", -1) >= 0 and s.get("tokens"):
            shares.append((s["miss_probe_tokens"], s["tokens"], s.get("miss_probe_ms") or 0.0))
    if not shares:
        return []
    tokens = sum(p for p, _, _ in shares)
    return [f"- auto's probes (all turns, turn 0 included): {tokens} tokens of {sum(t for _, t, _ in shares)}, "
            f"{sum(ms for _, _, ms in shares):.1f} ms run the probed way over {len(shares)} cells."]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: miss_auto.py AB.json (workbench session ... --ab miss=... --json)", file=sys.stderr)
        return 2
    try:
        lines = auto_against_best(json.loads(Path(args[0]).read_text()))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        print(f"{args[0]}: not an A/B --json document ({type(err).__name__}: {err})", file=sys.stderr)
        return 2
    print("\n".join(lines).lstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
