"""A campaign in, a PR-ready report out: CSV, Markdown and a static HTML page with the figures.

Everything lands in ``data/reports/<campaign>/`` (or a directory you name): ``attempts.csv``,
``runs.csv``, ``report.md`` (the attempts table and the attempt history, failed and reverted
attempts included, linking every figure's PNG), ``report.html`` (the same, with every figure embedded
and plotly.js inline, so the page opens offline and can be attached to a pull request as one file) and
``figures/<key>.png`` + ``.svg``, drawn by kaleido (``workbench.ledger.figures.static``; where no browser can
draw them the Markdown says why in one line).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from workbench.settings import defaults
from workbench.errors import LedgerError
from workbench.records import campaign_name_problem
from workbench.output.outdir import OutDir
from workbench.output.files import ledger_files, refuse_overwrite, write_text
from workbench.output.untrusted import for_html, for_markdown, for_markdown_code
from workbench.records import CLAIM_MIN_RUNS

if TYPE_CHECKING:
    import pandas as pd

    from workbench.ledger import Ledger

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
FIGURES_DIR = "figures"
_INLINE = re.compile(r"\\([!-/:-@\[-`{-~])|`([^`]*)`|\*\*(.+?)\*\*|(?<![\w\\])_(.+?)_(?!\w)")
CLAIM_RUNS = CLAIM_MIN_RUNS  # runs a side below which the report says its numbers are not a claim
_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}code{background:#f6f6f6;padding:0 3px}.figure{margin:2em 0}"""


@dataclass(frozen=True)
class ReportPaths:
    """Where a report's files are."""

    directory: Path
    attempts_csv: Path
    runs_csv: Path
    markdown: Path
    html: Path
    figures: tuple[str, ...]
    turns_csv: Path | None = None  # only when the campaign has long sessions
    images: tuple[Path, ...] = ()  # figures/<key>.png and .svg
    images_note: str = ""  # why there are no static images ('' when there are)


def report_dir(campaign: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``root`` when given, else ``<data root>/reports/<campaign>`` with the campaign name made safe
    for a path (a name that is no directory name, such as ``..`` in an older ledger, is refused)."""
    if root is not None:
        return Path(root)
    problem = campaign_name_problem(campaign)
    if problem is not None:
        raise LedgerError(campaign, f"{problem}; name the report's directory instead")
    return defaults.reports_dir() / _SAFE.sub("-", campaign)


def campaign_frames(ledger: Ledger, campaign: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(attempts, runs, ceilings of the campaign's hosts); raises LedgerError for an unknown campaign."""
    known = set(ledger.campaigns()["name"])
    if campaign not in known:
        raise LedgerError(ledger.path, f"no campaign '{campaign}'; known: {', '.join(sorted(known)) or 'none'}")
    attempts = ledger.attempts(campaign)
    runs = ledger.runs(campaign=campaign)
    hosts = sorted(set(attempts["host"]))
    ceilings = ledger.ceilings()
    ceilings = ceilings[ceilings["host"].isin(hosts)].copy()
    if len(hosts) > 1:  # one machine's walls must not pass for another's
        ceilings["name"] = ceilings["host"] + ":" + ceilings["name"]
    return attempts, runs, ceilings


def write_report(ledger: Ledger, campaign: str, out_dir: str | os.PathLike[str] | None = None,
                 all_attempts: bool = False) -> ReportPaths:
    """Write the campaign's CSV, Markdown and HTML report; returns the paths.

    Parameters
    ----------
    ledger
        An open :class:`~workbench.ledger.Ledger`.
    campaign
        The campaign to report on.
    out_dir
        Directory for the files (default ``<data root>/reports/<campaign>``).
    all_attempts
        Every attempt in the table, not only the latest finished one per configuration (the history
        lists every attempt either way).
    """
    from workbench.ledger import export_csv, markdown_table
    from workbench.ledger.figures.static import render_static, static_paths, write_static

    attempts, runs, ceilings = campaign_frames(ledger, campaign)
    directory = report_dir(campaign, out_dir)
    OutDir.open(directory, made=1).close()  # the report's directory is the workbench's: never a link
    sources = ledger_files(ledger.path)  # a report never lands on the ledger it reads
    figures = all_figures(ledger, campaign, (attempts, runs, ceilings))
    static = render_static(figures, scale=2.0)
    for path in [directory / "report.md", directory / "report.html",
                 *static_paths(static, directory / FIGURES_DIR)]:  # refused before any file is written
        refuse_overwrite(path, inputs=sources)
    csvs = export_csv(ledger, directory, campaign=campaign, made=1)
    table = markdown_table(ledger, campaign, all_attempts)
    note = few_runs_note(attempts)
    if note:
        table = f"{note}\n\n{table}"
    history = history_lines(attempts)
    images = write_static(static, directory / FIGURES_DIR, inputs=sources, made=2)
    md = write_text(directory / "report.md", _markdown(campaign, table, history, figures, static.images,
                                                      static.unavailable), inputs=sources, made=1)
    page = write_text(directory / "report.html", _html(campaign, table, history, figures), inputs=sources, made=1)
    turns_csv = next((p for p in csvs[2:] if p.name.endswith("turns.csv")), None)  # ranks.csv may follow it
    return ReportPaths(directory, csvs[0], csvs[1], md, page, tuple(figures), turns_csv,
                       tuple(images), static.unavailable)


def all_figures(ledger: Ledger, campaign: str, frames: tuple[pd.DataFrame, ...] | None = None) -> dict[str, Any]:
    """Every figure of the campaign by key: the campaign's and, when it has long sessions, per turn; when
    it has loads across several ranks, each rank's window."""
    from workbench.ledger.figures.experts import session_figures
    from workbench.ledger.figures.campaign import campaign_figures

    from workbench.ledger.figures.ranks import rank_windows
    from workbench.ledger.ranks import ranks_frame

    attempts, runs, ceilings = frames or campaign_frames(ledger, campaign)
    figures = {**campaign_figures(attempts, runs, ceilings), **session_figures(ledger.turns(campaign=campaign), attempts)}
    ranks = ranks_frame(ledger, campaign)
    if not ranks.empty:  # loads across several ranks: each rank's window, run by run
        figures["rank_windows"] = rank_windows(ranks, dict(zip(attempts["id"], attempts["label"])))
    return figures


@dataclass(frozen=True)
class FigureFiles:
    """What :func:`write_figures` wrote: the static images, the interactive page, and why no images."""

    images: tuple[Path, ...]
    interactive: Path
    note: str = ""


def write_figures(ledger: Ledger, campaign: str, out_dir: str | os.PathLike[str], *,
                  force: bool = False) -> FigureFiles:
    """The campaign's figures in ``out_dir``: ``<key>.png`` and ``<key>.svg`` each, and all of them
    interactive in ``figures.html`` (written even where no browser can draw the images). None of them
    lands on the ledger read (or an existing ledger or model without ``force``): every path is checked
    before any is written."""
    from workbench.ledger.figures.static import render_static, static_paths, write_interactive, write_static

    figures = all_figures(ledger, campaign)
    directory = Path(out_dir)
    sources = ledger_files(ledger.path)
    refuse_overwrite(directory / "figures.html", inputs=sources, force=force)
    OutDir.open(directory, made=1).close()  # a figures directory is the workbench's: never a link
    static = render_static(figures, scale=2.0)
    for path in static_paths(static, directory):
        refuse_overwrite(path, inputs=sources, force=force)
    images = write_static(static, directory, inputs=sources, force=force, made=1)
    page = write_interactive(figures, directory / "figures.html", f"workbench figures: {campaign}",
                             inputs=sources, force=force, made=1)
    return FigureFiles(tuple(images), page, static.unavailable)


def few_runs_note(attempts: pd.DataFrame) -> str:
    """One line when some finished attempt has fewer than :data:`CLAIM_RUNS` successful runs."""
    n = attempts["n"].dropna()
    n = n[n > 0]
    if n.empty or n.min() >= CLAIM_RUNS:
        return ""
    return (f"**n < {CLAIM_RUNS} is not a claim:** attempts here have {int(n.min())}–{int(n.max())} runs; "
            f"a speedup or slowdown needs at least {CLAIM_RUNS} runs a side to be stated in a pull request "
            "(README, \"Measuring honestly\").")


def history_lines(attempts: pd.DataFrame) -> list[str]:
    """The attempts in the order they were made, each with its hypothesis, verdict (and the speedup
    with its interval it rests on) and notes."""
    from workbench.records import format_effect
    from workbench.records.baseline_match import with_across

    lines, last_hypothesis = [], None
    for a in attempts.to_dict("records"):
        # every value from the ledger is untrusted text (README, "The ledger"): for_markdown each
        when = for_markdown(str(a["created"])[:16].replace("T", " "))
        what = for_markdown(f"{a['label']} ({a['cache']}, {a['device']})")
        verdict = f"**{for_markdown(a.get('verdict_text') or a['verdict'])}**"
        if _present(a.get("speedup")) and a.get("auto_verdict") != "baseline":
            verdict += " " + with_across(format_effect(a['speedup'], _number(a.get('ci_low')),
                                                       _number(a.get('ci_high'))), a, for_markdown)
            if _present(a.get("verdict_reason")):
                verdict += f": {for_markdown(a['verdict_reason'])}"
        parts = [f"{when}", f"`{for_markdown_code(str(a['id'])[:8])}` {what}", verdict]
        if _present(a["hypothesis"]) and a["hypothesis"] != last_hypothesis:  # said once, until it changes
            parts.append(f"hypothesis: {for_markdown(a['hypothesis'])}")
        last_hypothesis = a["hypothesis"]
        if _present(a["notes"]):
            parts.append(for_markdown(" / ".join(str(a["notes"]).strip().splitlines())))
        lines.append(" — ".join(parts))
    return lines


def _markdown(campaign: str, table: str, history: list[str], figures: dict[str, Any],
              images: Mapping[str, Any], images_note: str) -> str:
    out = [f"# Campaign `{for_markdown_code(campaign)}`", "", table, "", "## Attempt history (oldest first)", ""]
    out += [f"{i}. {line}" for i, line in enumerate(history, 1)] or ["_No attempts._"]
    out += ["", "## Figures", "", "Interactive in `report.html` beside this file.", ""]
    if images_note:
        out += [f"_{images_note}._", ""]
    for key, fig in figures.items():
        title = for_markdown(_alt(fig.layout.title.text or key))
        if key in images:
            out += [f"![{title}]({FIGURES_DIR}/{key}.png)", "",
                    f"[SVG]({FIGURES_DIR}/{key}.svg) · {title}", ""]
        else:
            out += [f"- {title}"]
    turns = ", `turns.csv`" if any(k.startswith("session_") for k in figures) else ""
    out += ["", f"Raw data: `attempts.csv`, `runs.csv`{turns}.", ""]
    return "\n".join(out)


def _html(campaign: str, table: str, history: list[str], figures: dict[str, Any]) -> str:
    turns = '<a href="turns.csv">turns.csv</a>, ' if any(k.startswith("session_") for k in figures) else ""
    body = [f"<h1>Campaign <code>{for_html(campaign)}</code></h1>", _table_html(table),
            "<h2>Attempt history (oldest first)</h2>", "<ol>"]
    body += [f"<li>{_inline(line)}</li>" for line in history] + ["</ol>", "<h2>Figures</h2>"]
    for i, (key, fig) in enumerate(figures.items()):
        # plotly.js goes in once, inline, so the page needs no network and no sibling file.
        div = fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig-{key}")
        body.append(f'<div class="figure" id="figure-{key}">{div}</div>')
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>workbench report: {for_html(campaign)}</title><style>{_CSS}</style></head>"
            f"<body>{''.join(body)}<p>Raw data: <a href=\"attempts.csv\">attempts.csv</a>, "
            f"<a href=\"runs.csv\">runs.csv</a>, {turns}<a href=\"report.md\">report.md</a>.</p></body></html>\n")


def _alt(text: str) -> str:
    """A figure title as Markdown image text: no brackets, backticks or line breaks to break the link."""
    return re.sub(r"[\[\]`\n\r]+", " ", str(text)).strip()


def _table_html(markdown: str) -> str:
    """The ledger's Markdown table as HTML: the header line, then the rows (separator dropped)."""
    out, rows = [], []
    for line in markdown.splitlines():
        if line.startswith("| ---"):
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    if rows:
        head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
        out.append(f'<table id="attempts"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    return "".join(out)


def _inline(text: str) -> str:
    """The Markdown the table and history use — backslash escapes, ``code``, **bold**, ``_italics_`` —
    as HTML; every other character is text, escaped (:func:`workbench.output.untrusted.for_html`)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(for_html(text[pos:m.start()]))
        escaped, code, bold, italic = m.groups()
        if escaped is not None:
            out.append(for_html(escaped))
        elif code is not None:
            out.append(f"<code>{for_html(code)}</code>")
        else:
            out.append(f"<b>{_inline(bold)}</b>" if bold is not None else f"<i>{_inline(italic)}</i>")
        pos = m.end()
    out.append(for_html(text[pos:]))
    return "".join(out)


def _number(value: Any) -> float | None:
    return float(value) if _present(value) else None


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value) and str(value).strip() != ""
