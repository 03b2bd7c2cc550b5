"""The PR table: a campaign's attempts as a Markdown table ready to paste into a pull request.

It reads like the write-ups in ``shared/seeds``: a header line saying which machine, device and file
the numbers are about, then one row per configuration — by default its latest *finished* attempt
(failed, interrupted and superseded attempts stay in the attempt history, and ``all_attempts`` lists
them here too) — with the median, spread, the speedup against the baseline with its 95 % interval
(``1.14× [1.05–1.22]``, README "Measuring honestly"), the verdict and what the fast paths did.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.ledger.sessions import session_facts, session_lines
from workbench.ledger.settings_diff import settings_lines
from workbench.records.baseline_match import with_across
from workbench.records import failure_reason, format_effect, format_spread, format_verdict, model_display_name
from workbench.output.untrusted import for_markdown, for_markdown_code

if TYPE_CHECKING:
    import pandas as pd

    from workbench.ledger.store import Ledger

COLUMNS = ("attempt", "change", "cache", "median", "spread", "n", "GB/s", "vs baseline", "verdict", "engaged")
UNFINISHED = ("failed", "running")  # measured verdicts of attempts that did not finish
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def export_markdown(ledger: Ledger, path: str | os.PathLike[str], campaign: str | None = None,
                    all_attempts: bool = False, force: bool = False) -> Path:
    """Write :func:`markdown_table` to ``path``; returns it. Never onto the ledger itself, and over an
    existing ledger or model file only with ``force`` (:mod:`workbench.output.files`)."""
    from workbench.output.files import ledger_files, refuse_overwrite, write_text

    refuse_overwrite(path, inputs=ledger_files(ledger.path), force=force)  # before the table is built
    return write_text(path, markdown_table(ledger, campaign, all_attempts) + "\n",
                      inputs=ledger_files(ledger.path), force=force)


def markdown_table(ledger: Ledger, campaign: str | None = None, all_attempts: bool = False) -> str:
    """A PR-ready Markdown table of the attempts (of one campaign), oldest first, under a header line:
    the latest finished attempt per configuration, or every attempt with ``all_attempts``."""
    attempts = ledger.attempts(campaign)
    if attempts.empty:
        return f"_No attempts{f' in campaign {for_markdown(campaign)}' if campaign else ''}._"
    runs = ledger.runs(campaign=campaign)
    by_attempt = {key: group for key, group in runs.groupby("attempt_id")}
    shown = attempts if all_attempts else latest_finished(attempts, by_attempt)
    several_hosts = attempts["host"].nunique() > 1
    lines = [_header(shown if not shown.empty else attempts, campaign), ""]
    if shown.empty:
        return "\n".join(lines + [f"_No attempt finished: {len(attempts)} failed or interrupted, listed in the "
                                  "attempt history (`--all` shows them here)._"])
    # An engine A/B names the build each attempt ran; a table of strategies has no such column.
    builds = "binary_hash" in shown and bool(shown["binary_hash"].notna().any())
    # several models: each row names its own (the ledger's name: two identities never share one)
    models = shown["model"].nunique() > 1
    columns = [*COLUMNS[:1], *(["model"] if models else []), *COLUMNS[1:2], *(["binary"] if builds else []),
               *COLUMNS[2:]]
    lines += [_row(columns), _row(["---"] * len(columns))]
    for a in shown.to_dict("records"):
        a = {k: _none(v) for k, v in a.items()}
        cells = _cells(a, by_attempt.get(a["id"]), several_hosts)
        lines.append(_row([*cells[:1], *([for_markdown(a["model"] or "—")] if models else []), *cells[1:2],
                           *([_binary(a)] if builds else []), *cells[2:]]))
    if len(shown) < len(attempts):
        lines += ["", _omitted(attempts, shown)]
    settings = settings_lines(shown, attempts, lambda attempt_id: _environment_of(ledger, attempt_id))
    if settings:
        lines += ["", *settings]
    sessions = session_lines(shown, ledger.turns(campaign=campaign))
    if sessions:
        lines += ["", "**Long sessions** (per turn: `workbench ledger show ID`, or the turns CSV):", ""]
        lines += [f"- {line}" for line in sessions]
    return "\n".join(lines)


def _environment_of(ledger: Ledger, attempt_id: str) -> dict[str, Any] | None:
    """A baseline's environment from outside the campaign (``--baseline ID``); None when it is gone."""
    from workbench.errors import LedgerError

    try:
        return ledger.attempt(attempt_id).get("environment")
    except LedgerError:
        return None


def latest_finished(attempts: pd.DataFrame, runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per configuration (host, kind, change, strategy, parameters, device, file path and content,
    requested cache state, an engine's build), its latest attempt that finished, in the order the
    attempts were made."""
    measured = attempts["auto_verdict"].where(attempts["auto_verdict"].notna(), attempts["verdict"])
    finished = attempts[~measured.isin(UNFINISHED)]
    keys = [_config_key(a, runs.get(a["id"])) for a in finished.to_dict("records")]
    latest: dict[tuple[str, ...], int] = {}
    for position, key in enumerate(keys):  # oldest first, so the last one seen is the latest
        latest[key] = position
    return finished.iloc[sorted(latest.values())]


def _config_key(a: dict[str, Any], runs: pd.DataFrame | None) -> tuple[str, ...]:
    asked = str(runs["cache_state"].iloc[0]) if runs is not None and len(runs) else str(a["cache"])
    params = json.dumps(a["params"] or {}, sort_keys=True, default=str)
    # the path too, not only the content: the same bytes on tmpfs and on a disk load differently
    file = (a["file_path"], a["file_hash"])
    # an engine's build too: the same command line running two builds is two configurations
    build = a.get("binary_hash")
    return tuple(map(str, (a["host"], a.get("kind"), a["label"], a["strategy"], params, a["device"], *file, asked,
                           build)))


def _omitted(attempts: pd.DataFrame, shown: pd.DataFrame) -> str:
    rest = attempts[~attempts["id"].isin(shown["id"])]
    measured = rest["auto_verdict"].where(rest["auto_verdict"].notna(), rest["verdict"])
    unfinished = int(measured.isin(UNFINISHED).sum())
    parts = [f"{unfinished} failed or interrupted"] if unfinished else []
    if len(rest) > unfinished:
        parts.append(f"{len(rest) - unfinished} superseded by a later run of the same configuration")
    return (f"_The latest finished attempt of each configuration; {len(rest)} more ({', '.join(parts)}) "
            "are in the attempt history (`--all` lists every attempt)._")


def _binary(a: dict[str, Any]) -> str:
    """``engine.py@1a2b3c4d``: the build's file names and a short hash (the full one is in the CSV)."""
    if not a.get("binary_hash"):
        return "—"
    names = " + ".join(Path(p).name for p in str(a.get("binary_path") or "").split(" + "))
    return f"{for_markdown(names)}@`{for_markdown_code(str(a['binary_hash']).rpartition(':')[2][:8])}`"


def strategy_kind(attempt: dict[str, Any]) -> str:
    """``"peer"`` for a reference strategy (a stock library's loader; the runner records it in the
    attempt's environment), else ``"strategy"``."""
    environment = attempt.get("environment")
    return str((environment if isinstance(environment, dict) else {}).get("strategy_kind") or "strategy")


def _change(a: dict[str, Any]) -> str:
    return for_markdown(f"{a['label']} (peer)" if strategy_kind(a) == "peer" else str(a["label"]))


def _cells(a: dict[str, Any], runs: pd.DataFrame | None, several_hosts: bool) -> list[str]:
    # Every value from the ledger is untrusted text (it may come from another machine's ledger): each
    # goes through for_markdown, or for_markdown_code inside a code span; numbers are formatted here.
    ident = f"`{for_markdown_code(a['id'][:8])}`" + (f" ({for_markdown(a['host'])})" if several_hosts else "")
    n = "—" if a["n"] is None else str(a["n"]) + (f" + {a['n_failed']} failed" if a["n_failed"] else "")
    return [
        ident, _change(a), for_markdown(_cache(a["cache"], runs)), _ms(a["median_s"]),
        format_spread(a["spread_pct"], a["n"], a["stable"]), n, for_markdown(_gbps(a)), _vs_baseline(a),
        for_markdown(_verdict(a, runs)),
        for_markdown(session_facts(a) if a.get("kind") == "session" else _engaged(runs)),
    ]


def _engaged(runs: pd.DataFrame | None) -> str:
    """What the fast paths did, ``zero_copy: 92/92 tensors ON``, from the runs (notes dropped).

    A fast path that did not engage must read INERT in the PR table, not pass as a win; if runs
    disagree, every distinct fact is listed.
    """
    if runs is None or "engaged" not in runs:
        return "—"
    facts: dict[str, None] = {}
    for value in runs["engaged"]:
        for text in (json.loads(value) if isinstance(value, str) else value) or ():
            head, _, tail = str(text).partition(" — ")
            facts[f"{head} {tail.split(' ')[0]}".strip()] = None
    facts.update(dict.fromkeys(_shift_copy(runs)))
    return "; ".join(facts) or "—"


def _shift_copy(runs: pd.DataFrame) -> list[str]:
    """``shift copy 13.32 MiB (experts 0 B)`` for loads that counted bounce-buffer shift copies (odirect)."""
    out = []
    for value in runs.get("result", ()):
        result = json.loads(value) if isinstance(value, str) else value
        counters = ((result or {}).get("result") or {}).get("counters") or {}
        if "shift_copy_bytes" in counters or "expert_shift_copy_bytes" in counters:
            total, experts = counters.get("shift_copy_bytes", 0), counters.get("expert_shift_copy_bytes", 0)
            out.append(f"shift copy {_size(int(total))} (experts {_size(int(experts))})")
    return list(dict.fromkeys(out))


def _header(attempts: pd.DataFrame, campaign: str | None) -> str:
    records = [{k: _none(v) for k, v in a.items()} for a in attempts.to_dict("records")]
    hosts = ", ".join(sorted({str(a["host"]) for a in records}))
    # An attempt recorded without device info or file identity should not add a vaguer duplicate,
    # and one that never named a device or file (a sweep point that failed before) adds nothing.
    devices = _most_specific({str(a["device"]): _device(a) for a in records if a.get("device_info")}, records, "device")
    files = _most_specific({str(a["file_path"]): _file(a) for a in records if a["file_hash"]}, records, "file_path")
    first, last = attempts["created"].min()[:10], attempts["created"].max()[:10]
    dates = first if first == last else f"{first} – {last}"
    scope = f"**Campaign** {for_markdown(campaign)} · " if campaign else ""
    return (f"{scope}**Machine** {for_markdown(hosts)} · **device** {for_markdown(devices or '—')} · "
            f"**file** {for_markdown(files or '—')} · **date** {for_markdown(dates)}")


def _most_specific(known: dict[str, str], records: list[dict[str, Any]], key: str) -> str:
    described = {**{str(a[key]): (_device(a) if key == "device" else _file(a)) for a in records}, **known}
    return ", ".join(sorted({v for v in described.values() if v}))  # one model named by two paths: once


def _device(a: dict[str, Any]) -> str:
    info = a.get("device_info") or {}
    name = info.get("name")
    return f"{name} ({a['device']})" if name else str(a["device"] or "")


def _file(a: dict[str, Any]) -> str:
    name = a.get("model") or model_display_name(str(a["file_path"] or ""))  # the ledger's name for it
    if not name:
        return ""
    parts = [name]
    if a["file_size"] is not None:
        parts.append(_size(int(a["file_size"])))
    if a["file_hash"]:
        parts.append(f"{str(a['file_hash'])[:20]}…")
    return ", ".join(parts)


def _cache(cache: str | None, runs: pd.DataFrame | None) -> str:
    if runs is None or cache not in ("cold", "warm"):
        return cache or "—"
    missed = int((runs["cache_reached"] == False).sum())  # noqa: E712 (None means unknown)
    # A state that was asked for but not reached must never read as reached.
    return f"{cache} (not reached {missed}/{len(runs)})" if missed else cache


def _gbps(a: dict[str, Any]) -> str:
    if a["gbps"] is None:
        return "—"
    text = f"{a['gbps']:.2f}"
    if a["ceiling_gbps"]:
        text += f" ({a['gbps'] / a['ceiling_gbps']:.0%} of {a['ceiling_name'] or 'ceiling'})"
    return text


def _vs_baseline(a: dict[str, Any]) -> str:
    if a["auto_verdict"] == "baseline":
        return "baseline"
    return with_across(format_effect(a["speedup"], a.get("ci_low"), a.get("ci_high")), a, for_markdown)


def _verdict(a: dict[str, Any], runs: pd.DataFrame | None) -> str:
    verdict, auto = a["verdict"], a["auto_verdict"]
    if verdict == "running":
        return "unfinished (runner stopped before the verdict)"
    text = a.get("verdict_text") or format_verdict(verdict, auto, a.get("verdict_n"))
    if "failed" in (verdict, auto) or a["n_failed"]:
        reason = _failure_reason(runs) or (a["notes"] or "").strip().split("\n")[0][:100]
        text += f" — {reason}" if reason else ""
    return text


def _failure_reason(runs: pd.DataFrame | None) -> str:
    if runs is None or runs.empty:
        return failure_reason(0, [], 0)
    wrong = int((runs["verified"] == False).sum())  # noqa: E712
    return failure_reason(len(runs), [str(e) for e in runs["error"].dropna()], wrong)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1000
    if ms >= 1000:
        return f"{ms:,.0f}".replace(",", " ") + " ms"
    return f"{ms:.{0 if ms >= 100 else 1 if ms >= 10 else 2}f} ms"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def _row(cells: Any) -> str:
    # cells arrive cleaned (for_markdown escapes a pipe); an unescaped one left anywhere is escaped too
    return "| " + " | ".join(_UNESCAPED_PIPE.sub(r"\\|", " ".join(str(c).splitlines())) for c in cells) + " |"


def _none(value: Any) -> Any:
    """SQL NULL comes back from pandas as NaN in numeric columns; the table wants None."""
    return None if isinstance(value, float) and value != value else value
