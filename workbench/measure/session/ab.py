"""Session A/B: arms that differ in one or more session options, run as fresh worker processes in ABBA
order, checked to have read and landed the same bytes, compared metric by metric with a verdict.

``workbench session MODEL --ab "placement=bounce" --ab "placement=inplace" --rounds 4 [options]``:
each ``--ab`` is ``key=value`` pairs over the session's options (any :class:`SessionConfig` field, dashes
or underscores, plus ``cache`` and ``device``) applied to the options the command line gives; the first
arm is the baseline. Round ``r`` runs every arm once, forwards on even rounds and backwards on odd
ones (:func:`workbench.measure.run.order.interleave`), each cell a whole session in its own worker, with
``verify_end`` (the last layer's uploads read back after every turn, the cache against the file at
the end, all outside the timing).

Checks: every cell read the same payload bytes per token and landed the same expert bytes per token
(the write-up's 230.77 MiB/token in every cell) — unless the variable changes what is read (cache
size, policy, routing), which the check then says —, every cell verified what it landed, and no
cell's memory pressure reached the session's own files (``own-files``: under a balloon, what the
cell measured is the method, so the A/B fails rather than presenting it as a finding).
Each metric is a ratio of the candidate arm's cells to the baseline's, median over median, with its
95 % interval and verdict by the workbench's rule (:func:`workbench.measure.run.effect.ratio_effect`,
paired by round from ``MIN_PAIRED_ROUNDS`` rounds on: :data:`DEFAULT_ROUNDS` is that, so the default
A/B can make a claim), and a higher/lower verdict from fewer than 5 paired rounds carries the caveat
every verdict does (:func:`workbench.records.verdict_caveat`). A cell's figures (:attr:`SessionAbResult.figures`)
are exactly what the effects compare: its turns after the first (the cache filling) when it has three
or more. The candidate cells' ledger attempts carry the tok/s effect as their verdict, and the rounds
it rests on (``environment["ab"]``), so ``ledger list`` gives it the same caveat.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.errors import ParamError
from workbench.expert.session_config import SessionConfig, check_config
from workbench.measure.run.effect import MIN_PAIRED_ROUNDS
from workbench.measure.session.ab_metrics import METRICS, SHOWN, metric_caveat
from workbench.records import CLAIM_MIN_RUNS, format_effect, verdict_caveat

if TYPE_CHECKING:
    from workbench.measure.session.runner import SessionResult

# what the read bytes may legitimately differ by: these options change what the cache reads
CHANGES_READS = frozenset({"cache_mib", "cache_experts", "policy", "experts_per_token", "trace", "distribution",
                           "zipf_s", "seed", "turns", "tokens", "prefetch", "miss"})
OUTER_KEYS = ("cache", "device")
DEFAULT_ROUNDS = max(MIN_PAIRED_ROUNDS, CLAIM_MIN_RUNS)  # fewer are never paired by round (below 5: no claim)
@dataclass(frozen=True)
class Arm:
    label: str  # the --ab text
    config: SessionConfig
    cache: str
    device: str
    changed: tuple[str, ...]  # the option names this arm sets


@dataclass(frozen=True)
class MetricEffect:
    """Candidate arm over baseline arm for one metric: ``ratio [low–high]`` and what it means."""

    arm: str
    metric: str
    baseline_median: float
    candidate_median: float
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str  # higher | lower | inconclusive
    judgement: str  # better | worse | "" (inconclusive)
    reason: str
    n: int  # paired rounds (both cells finished)
    caveat: str = ""  # "(n=3 < 5: not a claim)" on a higher/lower verdict from fewer than 5 rounds

    def line(self) -> str:
        eff = format_effect(self.ratio, self.low, self.high) if self.ratio is not None else "no ratio"
        word = f"{self.verdict} ({self.judgement})" if self.judgement else self.verdict
        word = " ".join(filter(None, [word, self.caveat]))
        return (f"{self.metric}: {_num(self.baseline_median)} → {_num(self.candidate_median)}, {eff} {word} — "
                f"{self.reason}, n = {self.n}")


@dataclass(frozen=True)
class SessionAbResult:
    arms: tuple[Arm, ...]
    cells: tuple[tuple[int, int, Any], ...]  # (arm index, round, SessionResult)
    effects: tuple[MetricEffect, ...]
    checks: tuple[str, ...]  # one line per check, "ok: …" or "FAILED: …" or "n/a: …"
    skipped_turns: int
    figures: tuple[dict[str, float] | None, ...] = ()  # per cell: METRICS and SHOWN over the turns compared

    @property
    def failed_checks(self) -> list[str]:
        return [c for c in self.checks if c.startswith("FAILED")]


def parse_ab(spec: str, base: SessionConfig, cache: str, device: str) -> Arm:
    """One ``--ab`` text (``key=value ...``) applied to ``base``."""
    names = {f.name: f for f in fields(SessionConfig)}
    changes: dict[str, Any] = {}
    outer = {"cache": cache, "device": device}
    for part in spec.split():
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ParamError("session", "ab", f"{spec!r}: expected key=value pairs, got {part!r}")
        if key in OUTER_KEYS:
            outer[key] = value
        elif key in names:
            changes[key] = _convert(spec, key, value, base)
        else:
            known = ", ".join(sorted(list(names) + list(OUTER_KEYS)))
            raise ParamError("session", "ab", f"{spec!r}: unknown option {key!r} (known: {known})")
    if not spec.split():
        raise ParamError("session", "ab", f"{spec!r} sets nothing")
    config = dataclasses.replace(base, **changes)
    check_config(config)
    given = {"cache": cache, "device": device}
    return Arm(spec, config, outer["cache"], outer["device"],
               tuple(changes) + tuple(k for k in OUTER_KEYS if outer[k] != given[k]))


def _convert(spec: str, key: str, text: str, base: SessionConfig) -> Any:
    current = getattr(base, key)
    if text.lower() == "none" and key != "prefetch":  # --prefetch none is a predictor, not a default
        return None
    kind = {"cache_mib": float, "cache_experts": int, "experts_per_token": int, "gate": float,
            "memory_limit_mib": float, "trace": str}.get(key) or type(current)
    try:
        if kind is bool:
            if text.lower() not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                raise ValueError(text)
            return text.lower() in ("1", "true", "on", "yes")
        return kind(text)
    except ValueError:
        raise ParamError("session", "ab", f"{spec!r}: {key}={text!r}: expected {kind.__name__}") from None


def run_session_ab(file: str, arms: Sequence[Arm], rounds: int, *, run_cell: Callable[..., SessionResult],
                   say: Callable[[str], None] = lambda _m: None) -> SessionAbResult:
    """Every (round, arm) cell in ABBA order through ``run_cell(arm, label)`` (each arm with
    ``verify_end``: what a cell landed is checked, untimed); then the checks and the effects."""
    from workbench.measure.run.order import interleave

    if len(arms) < 2:
        raise ParamError("session", "ab", f"an A/B needs at least two arms, got {len(arms)}")
    if rounds < 1:
        raise ParamError("session", "rounds", f"must be >= 1, got {rounds}")
    arms = [dataclasses.replace(a, config=dataclasses.replace(a.config, verify_end=True)) for a in arms]
    order = interleave(len(arms), rounds, "abba")
    cells: list[tuple[int, int, Any]] = []
    seen = [0] * len(arms)
    for n, i in enumerate(order):
        say(f"cell {n + 1}/{len(order)}: {arms[i].label} (round {seen[i] + 1})")
        cells.append((i, seen[i], run_cell(arms[i], f"{arms[i].label} · round {seen[i] + 1}")))
        seen[i] += 1
    turns = min(a.config.turns for a in arms)
    skip = 1 if turns >= 3 else 0
    checks = _checks(arms, cells)
    figures = tuple(cell_figures(r, skip) for _, _, r in cells)
    effects = tuple(e for j in range(1, len(arms)) for e in _effects(arms, cells, figures, 0, j))
    return SessionAbResult(tuple(arms), tuple(cells), effects, checks, skip, figures)


def cell_figures(result: Any, skip: int) -> dict[str, float] | None:
    """A finished cell's figures over the turns the effects compare (None for a cell that failed)."""
    if result.report is None or result.error:
        return None
    turns = _cell_turns(result, skip)
    return {name: fn(turns) for name, fn in [*((m, f) for m, (f, _) in METRICS.items()), *SHOWN.items()]}


def _cell_turns(result: Any, skip: int) -> list[Any]:
    turns = list(result.report.turns) if result.report is not None else []
    return turns[skip:] if len(turns) > skip else turns


def _checks(arms: Sequence[Arm], cells: Sequence[tuple[int, int, Any]]) -> tuple[str, ...]:
    done = [(i, r) for i, _, r in cells if r.report is not None and not r.error]
    out = []
    failed = len(cells) - len(done)
    out.append(f"FAILED: {failed} of {len(cells)} cells did not finish" if failed
               else f"ok: all {len(cells)} cells finished")
    # a cell that landed nothing (--miss host: every miss computed from the file's own mapping) has nothing to verify
    unverified = [r.attempt_id[:8] for _, r in done if r.report.summary.verified_slices <= 0
                  and r.report.summary.landed_bytes_per_token > 0]
    out.append(f"FAILED: cells {', '.join(unverified)} verified nothing" if unverified else
               f"ok: every cell's landed bytes verified against the file "
               f"({sum(r.report.summary.verified_slices for _, r in done):,} slices)")
    for what, key in (("read", "bytes_read_per_token"), ("landed", "landed_bytes_per_token")):
        values = {round(getattr(r.report.summary, key), 3) for _, r in done}
        shown = ", ".join(f"{v / 2**20:.2f}" for v in sorted(values))
        by_design = sorted(set().union(*(a.changed for a in arms)) & CHANGES_READS)
        if len(values) <= 1:
            out.append(f"ok: every cell {what} the same bytes per token ({shown} MiB)")
        elif by_design:
            out.append(f"n/a: bytes {what} per token differ ({shown} MiB) because {', '.join(by_design)} changes "
                       "what is read")
        else:
            out.append(f"FAILED: cells {what} different bytes per token ({shown} MiB)")
    from workbench.measure.session.runner import OWN_FILES_KIND

    squeezed = [r.attempt_id[:8] for _, _, r in cells if getattr(r, "memory_kind", "") == OWN_FILES_KIND]
    if squeezed:  # a finding about the method, not the arms: no verdict may rest on it
        out.append(f"FAILED: {len(squeezed)} of {len(cells)} cells ({', '.join(squeezed)}): the memory pressure "
                   "reached the session's own files (a balloon squeezing the whole machine), so they measure the "
                   "method, not the session; their effects are not findings")
    return tuple(out)


def _effects(arms: Sequence[Arm], cells: Sequence[tuple[int, int, Any]], figures: Sequence[dict[str, float] | None],
             base: int, cand: int) -> list[MetricEffect]:
    from workbench.measure.run.effect import ratio_effect

    def values(arm: int) -> dict[int, dict[str, float]]:
        return {rnd: f for (i, rnd, _), f in zip(cells, figures) if i == arm and f is not None}

    a, b = values(base), values(cand)
    rounds = sorted(set(a) & set(b))
    out = []
    for metric, (_, higher_better) in METRICS.items():
        x = [a[r][metric] for r in rounds]
        y = [b[r][metric] for r in rounds]
        bm, cm = _median(x), _median(y)
        if not rounds or min(x + y) <= 0:
            out.append(MetricEffect(arms[cand].label, metric, bm, cm, None, None, None, "inconclusive", "",
                                    "a cell's value is 0: no ratio" if rounds else "no pair of finished cells",
                                    len(rounds)))
            continue
        e = ratio_effect(y, x, paired=True)  # candidate / baseline
        verdict = {"faster": "higher", "slower": "lower"}.get(e.verdict, "inconclusive")
        judgement = "" if verdict == "inconclusive" else \
            ("better" if (verdict == "higher") == higher_better else "worse")
        reason = f"{e.reason} ({e.method})" if e.method else e.reason
        caveat = " ".join(filter(None, [verdict_caveat(verdict, len(rounds)), metric_caveat(metric, figures)]))
        out.append(MetricEffect(arms[cand].label, metric, bm, cm, e.speedup, e.ci_low, e.ci_high, verdict,
                                judgement, reason, len(rounds), caveat))
    return out


def _median(v: Sequence[float]) -> float:
    s = sorted(v)
    if not s:
        return math.nan
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def _num(v: float) -> str:
    if v != v:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def record_verdicts(ledger: Any, result: SessionAbResult) -> None:
    """Give every candidate cell's attempt its arm's tok/s effect (baseline: the first baseline cell)."""
    from workbench.measure.session.record import session_stats

    base_cells = [r for i, _, r in result.cells if i == 0 and r.attempt_id]
    if not base_cells:
        return
    checks = "; ".join(result.checks)
    for i, rnd, r in result.cells:
        if r.report is None or r.error:
            continue
        effects = [e for e in result.effects if e.arm == result.arms[i].label]
        head = next((e for e in effects if e.metric == "tok/s"), None)
        ab = {"arm": result.arms[i].label, "round": rnd + 1, "baseline": result.arms[0].label}
        ledger.describe_attempt(r.attempt_id, environment={"ab": {**ab, "rounds": head.n} if i and head else ab})
        lines = " | ".join(e.line() for e in effects)
        notes = f"{r.notes}; A/B vs {result.arms[0].label!r}: {lines}; checks: {checks}" if i else \
            f"{r.notes}; A/B baseline arm; checks: {checks}"
        verdict = "baseline" if i == 0 or head is None else \
            {"higher": "faster", "lower": "slower"}.get(head.verdict, "inconclusive")
        if result.failed_checks and i:
            verdict = "inconclusive"
        ledger.finish_attempt(r.attempt_id, session_stats(list(r.report.turns)),
                              baseline_id=None if i == 0 else base_cells[0].attempt_id,
                              speedup=None if i == 0 or head is None else head.ratio, verdict=verdict, notes=notes,
                              ci=(None, None) if i == 0 or head is None else (head.low, head.high),
                              verdict_reason="A/B baseline arm" if i == 0 or head is None else
                              f"tok/s over {head.n} rounds: {head.reason}")
