"""The attempt ledger: SQLite (WAL) history of campaigns, attempts and runs; pandas, CSV and Markdown out.

``Ledger(path)`` records and reads; :mod:`workbench.ledger.export` writes CSV, :mod:`workbench.ledger.table`
the PR-ready Markdown table;
:mod:`workbench.ledger.report` a campaign's whole report (CSV, Markdown and HTML with the figures).
pandas is imported only by the reading methods, so a runner that only writes stays light.
"""
from __future__ import annotations

from workbench.ledger.export import export_csv
from workbench.ledger.table import export_markdown, markdown_table
from workbench.ledger.report import write_report
from workbench.ledger.store import ATTEMPT_KINDS, RUNNING, Ledger

__all__ = ["ATTEMPT_KINDS", "Ledger", "RUNNING", "export_csv", "export_markdown", "markdown_table", "write_report"]
