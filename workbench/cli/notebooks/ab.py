"""Session A/Bs in the notebooks: 03 compares placements (bounce vs in place), 04 boundary release
(off vs on), each arm's cells as fresh workers in ABBA order (:mod:`workbench.measure.session.ab`),
verdicts recorded in the ledger, and these outputs: the effects table, the checks, a per-cell figure
for each metric and where each cell's time went."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from workbench.output.untrusted import for_html

MiB = 1 << 20


def run_ab(file: Path, base: Any, specs: Sequence[str], rounds: int, device: str, store: Path, campaign: str,
           hypothesis: str = "", cache: str = "asis", say: Callable[[str], None] = lambda _m: None) -> Any:
    """The A/B of ``specs`` (``--ab`` texts) over ``base`` (a SessionConfig), recorded; the SessionAbResult."""
    import dataclasses

    from workbench.measure.run.runner import open_ledger
    from workbench.measure.run.model import model_name  # a set's directory name, a file's stem
    from workbench.measure.session.runner import measure_session
    from workbench.measure.session.ab import parse_ab, record_verdicts, run_session_ab

    base = dataclasses.replace(base, verify_end=True)
    arms = [parse_ab(spec, base, cache, device) for spec in specs]
    ledger = open_ledger(store)
    try:
        def cell(arm: Any, label: str) -> Any:
            return measure_session(str(file), arm.config, device=arm.device, cache=arm.cache, ledger=ledger,
                                   campaign=campaign, hypothesis=hypothesis, label=f"{label} · {model_name(str(file))}")
        result = run_session_ab(str(file), arms, rounds, run_cell=cell, say=say)
        record_verdicts(ledger, result)
    finally:
        ledger.close()
    return result


def cells_frame(result: Any) -> Any:
    """One row per cell: arm, round, and the figures each metric's verdict is drawn from (the A/B's
    ``figures``: turn 0 left out when a cell has 3 or more), beside the shift copy and the bytes read."""
    import pandas as pd

    rows = []
    for (i, rnd, cell), figures in zip(result.cells, result.figures):
        if cell.report is None or figures is None:
            continue
        turns = list(cell.report.turns)[result.skipped_turns:] or list(cell.report.turns)
        tokens = sum(t.tokens for t in turns)
        row = {"arm": result.arms[i].label, "round": rnd + 1, "attempt": cell.attempt_id[:8], **figures}
        row["residual ms/token"] = row.pop("residual s/token") * 1e3
        row["bookkeeping ms/token"] = row.pop("bookkeeping s/token") * 1e3
        row["read MiB/token"] = sum(t.bytes_read for t in turns) / tokens / MiB
        rows.append(row)
    return pd.DataFrame(rows)


def ab_outputs(result: Any, metrics: Sequence[str]) -> list[Any]:
    """The effects table, the checks, a per-cell figure of each of ``metrics``, and the time split."""
    import pandas as pd
    from IPython.display import HTML

    from workbench.cli.notebooks.ui import results_html
    from workbench.ledger.figures.sessions import ab_cells, time_split
    from workbench.records import format_effect

    effects = pd.DataFrame([{
        "arm": e.arm, "metric": e.metric, "baseline": round(e.baseline_median, 4),
        "candidate": round(e.candidate_median, 4),
        "ratio [95 %]": format_effect(e.ratio, e.low, e.high) if e.ratio is not None else "—",
        "verdict": " ".join(filter(None, [f"{e.verdict} ({e.judgement})" if e.judgement else e.verdict, e.caveat])),
        "why": e.reason, "n": e.n,
    } for e in result.effects])
    checks = "".join(f"<li>{for_html(c)}</li>" for c in result.checks)
    cells = cells_frame(result)
    out = [HTML(f"<h4>Session A/B, baseline {for_html(result.arms[0].label)}: {len(result.cells)} cells</h4>"),
           results_html(effects, "wb-ab"), HTML(f"<ul class='wb-ab-checks'>{checks}</ul>"), results_html(cells)]
    out += [ab_cells(cells, m) for m in metrics if m in cells]
    turns = _turns(result)
    if not turns.empty:
        names = {c.attempt_id: f"{result.arms[i].label} r{r + 1}" for i, r, c in result.cells}
        out.append(time_split(turns, names))
    return out


def _turns(result: Any) -> Any:
    import pandas as pd

    rows = []
    for _, _, cell in result.cells:
        for t in (cell.report.turns if cell.report else ()):
            d = t.to_json()
            rows.append({"attempt_id": cell.attempt_id, "tokens": d["tokens"], "extra": d})
    return pd.DataFrame(rows)
