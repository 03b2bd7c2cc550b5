"""The actions and panels of notebooks 02 (host→device micro-benchmarks) and 05 (a campaign's report).

As in :mod:`workbench.cli.notebooks.actions`, the work is in plain functions (``run_h2d``,
``build_report``) and the ``*_panel`` functions only put ipywidgets controls in front of them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.settings import defaults
from workbench.cli.notebooks.actions import _best, _devices, attempts_table
from workbench.cli.notebooks.ui import Panel, ledger_path, parse_list, results_html
from workbench.records import MiB, plural
from workbench.output.untrusted import for_html


def h2d_panel(*, device: str, sizes_mib: Sequence[float], paths: Sequence[str], repeats: int, campaign: str,
              ledger: str = "") -> Panel:
    """The panel of notebook 02: upload paths × sizes on one device, recorded as attempts."""
    import ipywidgets as w

    from workbench.measure.ceilings.h2d import PATHS

    controls = {
        "device": w.Dropdown(options=_devices(device), value=device or _best(), description="device"),
        "sizes": w.Text(value=", ".join(f"{s:g}" for s in sizes_mib), description="sizes MiB"),
        "paths": w.SelectMultiple(options=PATHS, value=tuple(paths), description="paths", rows=len(PATHS)),
        "repeats": w.BoundedIntText(value=repeats, min=1, max=100, description="repeats"),
        "campaign": w.Text(value=campaign, description="campaign"),
    }
    store = ledger_path(ledger)

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        return run_h2d(v["device"], parse_list(v["sizes"]), v["paths"], v["repeats"], store, v["campaign"], say)
    return Panel("Host→device micro-benchmarks", controls, action)


def run_h2d(device: str, sizes_mib: Sequence[float], paths: Sequence[str], repeats: int, store: Path,
            campaign: str, say: Callable[[str], None] = lambda _m: None) -> list[Any]:
    """Measure, record in the ledger, and return the table and the GB/s-by-size figure."""
    from IPython.display import HTML

    from workbench.measure.ceilings.h2d import measure_h2d, record_h2d, results_frame
    from workbench.ledger.figures.campaign import h2d_lines

    sizes = [int(float(s) * MiB) for s in sizes_mib]
    root = defaults.data_root()  # the scratch file on the models' file system when there is one
    results = measure_h2d(device or _best(), sizes=sizes, paths=paths, repeats=repeats,
                          scratch_dir=str(root) if root.is_dir() else None, progress=say)
    ids = record_h2d(results, store, campaign=campaign)
    frame = results_frame(results)
    note = HTML(f"<p>{plural(len(ids), 'attempt')} recorded in <code>{for_html(store)}</code>, campaign "
                f"<code>{for_html(campaign)}</code>.</p>")
    return [note, results_html(frame), h2d_lines(frame)]


def report_panel(*, campaign: str, ledger: str = "", out_dir: str = "") -> Panel:
    """The panel of notebook 05: a campaign in; table, history, figures and exports out."""
    import ipywidgets as w

    from workbench.ledger import Ledger

    store = ledger_path(ledger)
    known: list[str] = []
    if store.is_file():  # a report reads: it never creates a ledger at a mistyped path
        with Ledger(store, readonly=True) as opened:
            known = list(opened.campaigns()["name"])
    controls = {
        "campaign": w.Combobox(value=campaign, options=known, description="campaign"),
        "out_dir": w.Text(value=out_dir, description="out dir", placeholder="data/reports/<campaign>"),
    }

    def action(v: Mapping[str, Any], say: Callable[[str], None]) -> list[Any]:
        return build_report(store, v["campaign"], v["out_dir"] or None, say)
    return Panel("Campaign report", controls, action)


def build_report(store: Path, campaign: str, out_dir: str | None = None,
                 say: Callable[[str], None] = lambda _m: None) -> list[Any]:
    """Write the report files and return what to show: where they are, the table, history, figures."""
    from IPython.display import HTML, Markdown

    from workbench.ledger import Ledger
    from workbench.ledger.figures.campaign import campaign_figures
    from workbench.ledger.report import campaign_frames, history_lines, report_dir, write_report

    say(f"writing the report of '{campaign}' …")
    target = Path(out_dir) if out_dir else report_dir(campaign)
    with Ledger(store, readonly=True) as ledger:
        paths = write_report(ledger, campaign, target)
        attempts, runs, ceilings = campaign_frames(ledger, campaign)
    where = HTML("<p>Report written: " + ", ".join(
        f"<code>{for_html(p)}</code>" for p in (paths.attempts_csv, paths.runs_csv, paths.markdown, paths.html)) + "</p>")
    history = Markdown("**Attempt history (oldest first)**\n\n" + "\n".join(
        f"{i}. {line}" for i, line in enumerate(history_lines(attempts), 1)))
    figures = campaign_figures(attempts, runs, ceilings)
    return [where, results_html(attempts_table(attempts)), history, *figures.values()]
