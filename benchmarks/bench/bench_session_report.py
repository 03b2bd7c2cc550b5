"""Markdown of bench_session.py: the model, an A/B's cells and effects, and the pressure verdict."""
from __future__ import annotations

from pathlib import Path

MiB = 1 << 20


def model_line(path: Path) -> str:
    from workbench.expert.layout import layout_blobs

    from workbench.formats import open_index

    index = open_index(path)
    blobs = index.blobs
    layers = len({b.layer for b in blobs})
    _, report = layout_blobs(blobs, "inplace")
    remainders = sorted({b.offset % 4096 for b in blobs})
    return (f"{path.stat().st_size / 2**30:.2f} GiB, {layers} MoE layers × {len(blobs) // layers} blobs × "
            f"{blobs[0].n_experts} experts of {blobs[0].stride:,} B ({blobs[0].stride / 4096:g} pages), expert bytes "
            f"{sum(b.nbytes for b in blobs) / MiB:,.0f} MiB, blob offsets mod 4096 {remainders[:6]}"
            f"{' …' if len(remainders) > 6 else ''}; {report}")


def ab_section(result, metrics: list[str]) -> list[str]:
    """Per-cell rows, the effects with their intervals, the checks."""
    lines = ["", "| cell | arm | round | tok/s | residual ms/token | staged GB/s | wall (share) | QD | hit rate | "
             "MiB/token hit · page cache · disk | shift MiB/token | major faults | unreleased pages | memory |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, ((i, rnd, c), f) in enumerate(zip(result.cells, result.figures)):
        lines.append(_cell_row(n, result.arms[i].label, rnd, c, f))
    lines += ["", f"Effects, candidate arm over baseline arm `{result.arms[0].label}` (median of cells over median; "
                  f"95 % interval, paired by round; each cell's first {result.skipped_turns} turn left out):", "",
              "| arm | metric | baseline | candidate | ratio [95 %] | verdict | why | n |",
              "|---|---|---|---|---|---|---|---|"]
    from workbench.records import format_effect

    for e in result.effects:
        if e.metric not in metrics:
            continue
        ratio = format_effect(e.ratio, e.low, e.high) if e.ratio is not None else "—"
        verdict = " ".join(filter(None, [f"{e.verdict} ({e.judgement})" if e.judgement else e.verdict, e.caveat]))
        lines.append(f"| {e.arm} | {e.metric} | {_num(e.baseline_median)} | {_num(e.candidate_median)} | {ratio} | "
                     f"{verdict} | {e.reason} | {e.n} |")
    lines += ["", "Checks:", *[f"- {c}" for c in result.checks]]
    return lines


def _cell_row(n: int, arm: str, rnd: int, c, figures=None) -> str:
    """A cell's row; tok/s, residual, staged GB/s and shift are the figures its effects compare (turn 0
    left out with 3 turns or more), the rest is over all its turns."""
    if c.report is None:
        return f"| {n + 1} | {arm} | {rnd + 1} | failed: {c.error} |" + " |" * 10
    s, turns = c.report.summary, c.report.turns
    f = figures or {"tok/s": s.tokens_per_s, "residual s/token": s.residual_s_per_token, "staged GB/s": s.staged_gbps,
                    "shift MiB/token": sum(t.shift_copy_bytes for t in turns) / s.tokens / MiB}
    wall = f"{s.wall_name} {s.wall_gbps:.2f} ({s.staged_of_wall:.0%})" if s.staged_of_wall else "—"
    shift = f["shift MiB/token"]
    failed = f" **{c.error}**" if c.error else ""
    return (f"| {n + 1} `{c.attempt_id[:8]}` | {arm} | {rnd + 1} | {f['tok/s']:.2f} | "
            f"{f['residual s/token'] * 1e3:.2f} | {f['staged GB/s']:.3f} | {wall} | {s.read_queue_depth:.1f} | "
            f"{s.hit_rate:.0%} | {s.hit_bytes_per_token / MiB:.2f} · {s.page_cache_bytes_per_token / MiB:.2f} · "
            f"{s.disk_bytes_per_token / MiB:.2f} | {shift:.2f} | {s.majflt:,} | {s.unreleased_pages_first:,} → "
            f"{s.unreleased_pages_last:,} | {c.memory.split(' — ')[-1] if c.memory else '—'}{failed} |")


def pressure_cells(result) -> list[str]:
    """Per cell, what the pressure hit: the model's pages (lost, read again) against everything else
    (major faults — none on the model, which a session never maps —, storage reads the model's residency
    does not explain, the machine's swap-ins), the process's mapped file pages and what of them it locked
    after turn 0 (under a balloon), swap, compute time, and the outcome's kind (``own-files``: the
    squeeze reached the session's own files, so the cell measures the method). Medians per turn, turn 0
    left out."""
    lines = ["", "| cell | arm | tok/s | compute s/turn | major faults/turn (not the model) | model lost · read again "
             "MiB/turn | storage reads unexplained by the model's residency MiB/turn (upper bound, the model's "
             "in-turn churn included) | machine swap-ins/turn | file RSS MiB (min) | own file pages locked MiB | "
             "process swap MiB first→last | machine swap MiB first→last | kind | outcome |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n, (i, _rnd, c) in enumerate(result.cells):
        arm = result.arms[i].label
        if c.report is None:
            lines.append(f"| {n + 1} | {arm} | failed: {c.error} |" + " |" * 11)
            continue
        turns = c.report.turns[1:] or c.report.turns
        med = lambda key, scale=1.0: _median([getattr(t, key) / scale for t in turns if getattr(t, key) >= 0])  # noqa: E731
        first, last = turns[0], turns[-1]
        swap = lambda t, key: f"{getattr(t, key) / MiB:,.0f}" if getattr(t, key) >= 0 else "—"  # noqa: E731
        rss = [t.file_rss_bytes for t in turns if t.file_rss_bytes >= 0]
        lines.append(
            f"| {n + 1} `{c.attempt_id[:8]}` | {arm} | {c.report.summary.tokens_per_s:.2f} | {med('compute_s'):.3g} | "
            f"{med('majflt'):,.0f} | {med('model_lost_bytes', MiB):.1f} · {med('model_reread_bytes', MiB):.1f} | "
            f"{med('other_fetched_bytes', MiB):.1f} | {med('vm_swapin'):,.0f} | "
            f"{min(rss) / MiB if rss else float('nan'):,.1f} | {_locked(c.report.summary.facts)} | "
            f"{swap(first, 'swap_bytes')}→{swap(last, 'swap_bytes')} | "
            f"{swap(first, 'swap_used_bytes')}→{swap(last, 'swap_used_bytes')} | {c.memory_kind or '—'} | "
            f"{c.memory.split(' — ')[-1] if c.memory else '—'}{' **' + c.error + '**' if c.error else ''} |")
    return lines


def _locked(facts) -> str:
    """What the worker locked of its own file pages after turn 0 ("—": nothing pinned, e.g. a cgroup)."""
    if facts is None or facts.pinned_file_bytes < 0:
        return "—"
    note = " (not all: " + facts.pinned_note + ")" if facts.pinned_note else ""
    return f"{facts.pinned_file_bytes / MiB:,.1f}{note}"


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else float("nan")


def pressure_verdict(result, min_effect: float = 0.02) -> str:
    """Whether the write-up's symptom direction (more major faults and lower tok/s with the leak) shows."""
    effects = {e.metric: e for e in result.effects}
    faults, tps = effects.get("major faults/token"), effects.get("tok/s")
    oom = [c for i, _, c in result.cells if i == 1 and "OOM" in (c.memory or "")]
    oom_fixed = [c for i, _, c in result.cells if i == 0 and "OOM" in (c.memory or "")]
    from workbench.measure.session.runner import OWN_FILES_KIND

    squeezed = [c for _, _, c in result.cells if getattr(c, "memory_kind", "") == OWN_FILES_KIND]
    parts = [f"{len(oom)} of {sum(1 for i, _, _ in result.cells if i == 1)} leaking cells and {len(oom_fixed)} "
             "fixed ones met the OOM killer"] if oom or oom_fixed else []
    no_faults = faults is not None and faults.baseline_median == 0 and faults.candidate_median == 0
    if no_faults:
        parts.append("no major faults in either arm (a session reads the model and never maps it: only its own "
                     "libraries or swapped memory could fault)")
    elif faults is not None:
        parts.append(f"major faults/token with the leak: {faults.line()}")
    if tps is not None:
        parts.append(f"tok/s with the leak: {tps.line()}")
    slower = tps is not None and tps.verdict == "lower"
    leans = tps is not None and tps.ratio is not None and tps.ratio < 1 - min_effect
    more = no_faults or (faults is not None and faults.verdict == "higher")
    if squeezed:
        head = (f"**Not a finding**: in {len(squeezed)} of {len(result.cells)} cells the pressure reached the "
                "session's own files (kind `own-files`: its major faults after turn 0 above a few a turn), so "
                "those cells measure the method, not the session; nothing below is a result about the leak.")
    elif oom and not oom_fixed:
        head = "**Reproduced, to the end**: only the leaking build met the OOM killer."
    elif slower and more and not no_faults:
        head = "**Reproduced**: the leaking build faults more and decodes slower, both intervals clear of 1."
    elif slower:
        head = "**Half reproduced**: the leaking build decodes slower (interval clear of 1), without more major faults."
    elif leans:
        head = "**Direction seen, not established**: the leaking build leans slower, but the interval includes 1."
    else:
        head = "**Not reproduced** here: the leaking build was not measurably slower."
    tail = "; ".join(parts)
    return f"{head} {tail[:1].upper()}{tail[1:]}." if tail else head


def _num(v: float) -> str:
    return "—" if v != v else f"{v:.4g}"
