"""Plain-text tables of attempts and ceilings, as the CLI prints them (and a PR can quote them)."""
from __future__ import annotations

import os
from typing import Any, Sequence

from workbench.measure.run.attempt import AttemptResult
from workbench.records import format_spread
from workbench.output.untrusted import for_terminal

ATTEMPT_COLUMNS = ("attempt", "change", "cache", "median ms", "spread", "n", "GB/s", "fixed + stream ms",
                   "% ceiling", "vs baseline [95 % CI]", "verdict", "engaged")


def attempts_table(results: Sequence[AttemptResult]) -> str:
    """One row per attempt: id prefix, median, spread, n, GB/s, share of the ceiling, the speedup with
    its interval (``1.14× [1.05–1.22]``, README "Measuring honestly"), verdict, engaged
    (and the build's short hash when an external engine was timed)."""
    rows = [_attempt_row(r) for r in results]
    header = ATTEMPT_COLUMNS
    if any(binary_label(r) for r in results):
        header = (*ATTEMPT_COLUMNS[:2], "binary", *ATTEMPT_COLUMNS[2:])
        rows = [[*row[:2], binary_label(r) or "—", *row[2:]] for row, r in zip(rows, results)]
    text = format_table(header, rows, width=terminal_width())
    walls = {(r.ceiling_name, r.ceiling_gbps) for r in results if r.ceiling_name}
    caveats = {part.split(" ", 2)[1]: part.split(" ", 2)[2] for r in results for part in (r.notes or "").split("; ")
               if part.startswith("ceiling ") and part.count(" ") >= 2}  # measure/ceilings/age.py
    notes = [f"ceiling {name}: {gbps:.2f} GB/s" + (f" — {caveats[name]}" if name in caveats else "")
             for name, gbps in sorted(walls)]
    if not walls and any(r.stats.gbps for r in results):  # a GB/s without a wall to hold it to
        notes.append("no ceilings recorded for this host: run `workbench ceilings` for % of ceiling")
    return "\n".join([text, *notes])


def _attempt_row(r: AttemptResult) -> list[str]:
    s = r.stats
    n = f"{s.n}" + (f" (+{s.n_failed} failed)" if s.n_failed else "")
    return [
        r.attempt_id[:8] if r.recorded != "none" else "unsaved", _change(r),
        r.cache if len(r.cache) <= 24 else r.cache[:23] + "…",
        _num(s.median_s, 1e3, 1), format_spread(s.spread_pct, s.n, s.stable), n, _num(s.gbps, 1, 2),
        _split(r), _num(r.ceiling_fraction, 100, 0), r.effect, r.verdict_text, _engaged(r),
    ]


def _split(r: AttemptResult) -> str:
    """``4.1 + 12.3``: median fixed part (index, probe, allocation, staging, reader start, release) and
    streaming part of the window, ms (records/fixed.py); ``—`` without a load report (an engine)."""
    fixed, streaming = r.split
    return "—" if fixed is None else f"{fixed * 1e3:.1f} + {streaming * 1e3:.1f}"


def _change(r: AttemptResult) -> str:
    """The attempt's label; a reference strategy (a peer library's loader) says so."""
    from workbench.strategies import strategy_kind

    return f"{r.label} (peer)" if strategy_kind(r.config.strategy) == "peer" else r.label


def binary_label(r: AttemptResult) -> str:
    """``engine.py@1a2b3c4d``: the build an external attempt ran (its first run's), '' for a strategy."""
    from workbench.measure.engine.command import short_hash

    for run in r.runs:
        engine = run.report.external
        if engine is not None and engine.binary_hash:
            name = " + ".join(os.path.basename(p) for p in str(engine.binary_path).split(" + "))
            return f"{name}@{short_hash(engine.binary_hash)}"
    return ""


def phases_table(results: Sequence[AttemptResult]) -> str:
    """Median milliseconds per engine phase (columns) for each external attempt (rows); '' when no
    engine printed a phase line. Phases come in the order of their first appearance."""
    import statistics

    results = [r for r in results if r.config.strategy == "external"]
    names: dict[str, None] = {}
    for r in results:
        for run in r.runs:
            names.update(dict.fromkeys(run.phases))
    if not names:
        return ""
    rows = []
    for r in results:
        ok = [run for run in r.runs if run.ok]
        cells = [_num(statistics.median(run.phases.get(n, 0.0) for run in ok), 1e3, 1)
                 if any(n in run.phases for run in ok) else "—" for n in names]
        rows.append([r.attempt_id[:8], r.label, *cells])
    return format_table(("attempt", "phases: median ms", *names), rows)


def _engaged(r: AttemptResult) -> str:
    """The engaged facts of the attempt's first successful run (they rarely differ between runs)."""
    for run in r.runs:
        if run.ok:
            return "; ".join(run.engaged) or "—"
    return "—"


def _num(value: float | None, scale: float, digits: int) -> str:
    return "—" if value is None else f"{value * scale:.{digits}f}"


def ceilings_table(report: Any) -> str:
    """The measured walls, one per line."""
    rows = [[c.name, f"{c.gbps:.2f}", _detail(c.detail)] for c in report.ceilings]
    return format_table(("ceiling", "GB/s", "how"), rows)


def _detail(detail: Any) -> str:
    parts = [str(detail.get("mode", ""))]
    if "device" in detail:
        parts.append(f"device {detail['device']}")
    if detail.get("locked") is False:
        parts.append("NOT page-locked (RLIMIT_MEMLOCK?)")
    return ", ".join(p for p in parts if p)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """Columns padded to their widest cell, numbers right-aligned; every cell one printable line
    (labels, notes and an engine's output are untrusted text: :func:`workbench.output.untrusted.for_terminal`).
    With ``width`` the last column (the engaged facts) wraps onto lines of its own under it so no line
    is wider (at least :data:`MIN_LAST` characters a line); JSON and CSV keep it whole."""
    header = [for_terminal(c) for c in header]
    rows = [[for_terminal(c) for c in row] for row in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    if width is not None and len(widths) > 1:
        room = max(MIN_LAST, width - sum(w + 2 for w in widths[:-1]))
        widths[-1] = min(widths[-1], max(room, len(header[-1])))
    lines = []
    for row in [list(header), *rows]:
        head, *more = _wrap(str(row[-1]), widths[-1])
        cells = [str(c).rjust(w) if _numeric(str(c)) else str(c).ljust(w) for c, w in zip(row[:-1], widths)]
        lines.append("  ".join([*cells, head]).rstrip())
        indent = sum(w + 2 for w in widths[:-1])
        lines += [" " * indent + piece for piece in more]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


MIN_LAST = 30


def terminal_width() -> int:
    """Columns of the terminal (``$COLUMNS`` first); 120 when the output is no terminal."""
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after ``; `` or a space where it can be."""
    import textwrap

    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [text]


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace("×", "").strip().isdigit()
