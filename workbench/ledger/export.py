"""Ledger exports as CSV for analysis (the PR-ready Markdown table is :mod:`workbench.ledger.table`).

``attempts.csv`` holds one row per attempt, ``runs.csv`` one per run; dict and list columns are JSON
text. Every quantity has one name (README, "The ledger"):

- ``load_s`` (runs) — the load window of one run: index plus the strategy's load, the time every
  statistic and verdict is computed from; ``median_s``/``min_s``/``max_s`` (attempts) are over it;
- ``gbps`` — tensor bytes / that window (attempts: / the median window);
- ``strategy_load_s``, ``strategy_gbps`` (runs) — the strategy's own load without the index, as the
  worker reports it (inside the raw ``result`` JSON, the worker's own message, these are
  ``result.load_s`` and ``result.gbps``, beside the window's ``load_s``);
- ``wall_s`` (runs) — the whole worker process, spawn to exit;
- what a run's load cost besides time, over its window (``records/costs.py``; empty for runs recorded
  before): ``process_read_bytes`` and ``process_rchar_bytes`` (/proc/self/io), ``disk_read_bytes``
  (/proc/diskstats on the model's block device, every process's), ``user_s``, ``system_s``,
  ``voluntary_switches``, ``involuntary_switches``, ``rss_before_bytes``, ``peak_rss_bytes``,
  ``pinned_peak_bytes``, ``registered_peak_bytes``, ``device_extra_bytes`` (beyond the model's tensor
  bytes) and ``page_cache_before_bytes``/``page_cache_after_bytes`` (the model's resident bytes);
- ``speedup``, ``ci_low``, ``ci_high`` (attempts) — baseline median / this median and its 95 % interval,
  also written as ``effect`` the way the tables show it (``1.14× [1.05–1.22]``);
- ``turns.csv`` (only when the campaign has long sessions) — one row per turn of each session attempt
  (``kind`` ``session``, whose ``median_s`` is over its turn times).

A text cell that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a tab
or a carriage return — also after leading blanks, and in their full-width forms ``＝ ＋ － ＠`` — a label
or hypothesis typed that way) is written with a leading ``'``.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from workbench.errors import OutputError
from workbench.ledger.ranks import ranks_frame
from workbench.ledger.table import export_markdown, markdown_table, strategy_kind
from workbench.output.files import ledger_files, refuse_overwrite, write_text
from workbench.records import COST_FIELDS, ReadEvidence, format_effect
from workbench.records.baseline_match import with_across
from workbench.output.untrusted import for_csv

if TYPE_CHECKING:
    import pandas as pd

    from workbench.ledger.store import Ledger

__all__ = ["attempts_frame", "csv_text", "export_csv", "export_markdown", "markdown_table", "neutralize", "runs_frame",
           "strategy_kind", "turns_frame", "write_csv"]

_JSON_COLUMNS = ("params", "device_info", "environment", "engaged", "phases", "result", "detail", "extra")


def export_csv(ledger: Ledger, directory_or_path: str | os.PathLike[str], campaign: str | None = None,
               force: bool = False, made: int | None = None) -> list[Path]:
    """Write attempts and runs as CSV; returns ``[attempts, runs]`` paths, then ``turns`` when the
    campaign has long sessions (one row per turn), then ``ranks`` when it has loads across several ranks
    (one row per rank per run, docs/multi-gpu.md).

    A directory gets ``attempts.csv``, ``runs.csv`` (and ``turns.csv``); a ``*.csv`` path gets the
    attempts and siblings ``<stem>_runs.csv`` (and ``<stem>_turns.csv``). None of them is ever written
    onto the ledger, nor over an existing ledger or model file without ``force`` (:mod:`workbench.output.files`),
    nor into a directory of the workbench's (a directory given: itself; ``made`` says how many) reached
    through a link.
    """
    target = Path(directory_or_path)
    if target.suffix.lower() == ".csv":
        paths = [target, target.with_name(f"{target.stem}_runs.csv"), target.with_name(f"{target.stem}_turns.csv")]
    else:
        paths = [target / "attempts.csv", target / "runs.csv", target / "turns.csv"]
    sources = ledger_files(ledger.path)
    if target.suffix.lower() != ".csv" and os.path.lexists(target) and not target.is_dir():
        refuse_overwrite(target, inputs=sources, force=False)  # the ledger itself: its own input
        raise OutputError(target, "is a file, not a directory: give a directory or a path ending in .csv")
    for path in paths:  # every refusal before any file is written
        refuse_overwrite(path, inputs=sources, force=force)
    frames = [attempts_frame(ledger, campaign), runs_frame(ledger, campaign), turns_frame(ledger, campaign)]
    if frames[2].empty:  # no long session: the two files every campaign has
        frames, paths = frames[:2], paths[:2]
    ranks = ranks_frame(ledger, campaign)
    if not ranks.empty:  # loads across several ranks: one row per rank per run (docs/multi-gpu.md)
        csv = target.suffix.lower() == ".csv"
        paths = [*paths, target.with_name(f"{target.stem}_ranks.csv") if csv else target / "ranks.csv"]
        frames = [*frames, ranks]
        refuse_overwrite(paths[-1], inputs=sources, force=force)
    if made is None:
        made = 0 if target.suffix.lower() == ".csv" else 1
    for frame, path in zip(frames, paths):
        write_text(path, csv_text(frame), inputs=sources, force=force, made=made)
    return paths


def write_csv(frame: pd.DataFrame, target: TextIO | None = None) -> None:
    """``frame`` as CSV, neutralized, to a text stream (default standard output)."""
    (sys.stdout if target is None else target).write(csv_text(frame))


def csv_text(frame: pd.DataFrame) -> str:
    """``frame`` as CSV text, neutralized.

    Lines end in CRLF (RFC 4180): with a bare LF the csv writer leaves a carriage return inside a
    cell unquoted, and a reader splits the row there."""
    return neutralize(frame).to_csv(index=False, lineterminator="\r\n")


def attempts_frame(ledger: Ledger, campaign: str | None = None) -> pd.DataFrame:
    """The attempts as ``attempts.csv`` holds them: JSON text columns, the formatted ``effect``, and
    ``strategy_kind`` (``peer`` for a reference strategy) next to ``strategy``."""
    attempts = ledger.attempts(campaign)
    kinds = [strategy_kind(a) for a in attempts.to_dict("records")]
    frame = _json_columns(attempts)
    frame.insert(frame.columns.get_loc("strategy") + 1, "strategy_kind", kinds)
    # the model's name in this ledger (two identities never share one: Ledger.model_names)
    frame.insert(frame.columns.get_loc("file_path"), "model", frame.pop("model").fillna(""))
    frame["effect"] = [_effect(a) for a in frame.to_dict("records")]
    return frame


def runs_frame(ledger: Ledger, campaign: str | None = None) -> pd.DataFrame:
    """The runs as ``runs.csv`` holds them: JSON text columns, GB/s of the window, and the strategy's
    own load (index excluded) under names of their own."""
    runs = ledger.runs(campaign=campaign)
    own = [((r or {}).get("result") or {}) for r in runs["result"]]  # the worker's LoadSummary
    frame = _json_columns(runs)
    load = frame["load_s"].astype(float)
    moved = frame["bytes"].astype(float)
    frame["gbps"] = moved.where((load > 0) & (moved > 0)) / load / 1e9  # no bytes vouched for: no GB/s
    frame["strategy_load_s"] = [o.get("load_s") for o in own]
    frame["strategy_gbps"] = [o.get("gbps") for o in own]
    frame["evidence"] = [_evidence_grade(r) for r in runs["result"]]  # an external engine's run: its grade
    costs = [((r or {}).get("costs") or {}) for r in runs["result"]]  # the worker's RunCosts, when it had them
    for name in COST_FIELDS:
        frame[name] = [c.get(name) for c in costs]
    return frame


def _evidence_grade(result: Any) -> str:
    """The evidence grade of an external engine's run ('' for any other run): bytes-read, mapping-touched,
    mapped-only, opened-only, none (``sampled`` for a run recorded before grades)."""
    evidence = result.get("evidence") if isinstance(result, dict) else None  # an ExternalRun's, flattened
    return ReadEvidence.from_json(evidence).level if evidence else ""


def turns_frame(ledger: Ledger, campaign: str | None = None) -> pd.DataFrame:
    """The turns of the long sessions as ``turns.csv`` holds them (``extra`` as JSON text)."""
    return _json_columns(ledger.turns(campaign=campaign))


def neutralize(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells cannot run as spreadsheet formulas (a leading ``'``); numbers stay."""
    from pandas.api.types import is_numeric_dtype

    out = frame.copy()
    for col in out.columns:
        if not is_numeric_dtype(out[col]):
            out[col] = out[col].map(_neutral)
    return out


def _neutral(value: Any) -> Any:
    # Spreadsheets skip what draws nothing before a formula and read full-width signs (＝, ＋, －, ＠) as
    # theirs: the first visible character, by Unicode property, NFKC-normalized, decides.
    return for_csv(value) if isinstance(value, str) else value


def _effect(a: dict[str, Any]) -> str:
    if a.get("auto_verdict") == "baseline":
        return "baseline"
    return with_across(format_effect(_none(a.get("speedup")), _none(a.get("ci_low")), _none(a.get("ci_high"))), a)


def _none(value: Any) -> Any:
    return None if isinstance(value, float) and value != value else value


def _json_columns(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for col in _JSON_COLUMNS:
        if col in out:
            out[col] = out[col].map(lambda v: None if v is None else json.dumps(v, sort_keys=True, default=str))
    return out
