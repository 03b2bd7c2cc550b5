"""The ledger's reading methods: attempts, runs, turns, campaigns and ceilings as frames or records.

:class:`LedgerQueries` is mixed into :class:`~workbench.ledger.store.Ledger`, which holds the connection
(``_conn``), the file (``path``), whether it was opened read-only, and ``reap_abandoned``; the writing
methods stay there. pandas is imported only by the methods that return frames.
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from workbench.errors import LedgerError
from workbench.ledger import schema
from workbench.ledger.owner import RUNNING, abandoned, interrupted_values
from workbench.ledger.schema import decode
from workbench.records import AttemptStats, RunRecord, format_verdict, verdict_n
from workbench.records.baseline_match import FACTS, row_across
from workbench.records.model_names import distinct_model_names, model_display_name

if TYPE_CHECKING:
    import pandas as pd

MIN_PREFIX = 6

# with the baseline's successful runs, for the runs a side behind the verdict (its caveat below 5)
# and its model, cache state and device, for what differs between them (records/baseline_match.py)
_BASE_FACTS = FACTS
_ATTEMPT_SELECT = ("SELECT c.name AS campaign, a.*, b.n AS baseline_n"
                   + "".join(f", b.{k} AS baseline_{k}" for k in _BASE_FACTS) + " FROM attempts a"
                   " JOIN campaigns c ON c.id = a.campaign_id LEFT JOIN attempts b ON b.id = a.baseline_id")
# derived, beside the stored columns: the verdict as every table shows it (format_verdict), and what
# the baseline measured differently ('' when nothing: a ratio across two models says so everywhere)
_DERIVED = ("baseline_n", "verdict_n", "verdict_text", "baseline_across", "model")
# every model the ledger holds, for names two identities never share (records/model_names.py)
_MODELS = ("SELECT DISTINCT a.file_path, a.file_hash, CASE WHEN json_valid(a.environment) THEN (SELECT COUNT(*)"
           " FROM json_each(a.environment, '$.model_files') m WHERE json_extract(m.value, '$.name') NOT LIKE"
           " '%.json') END AS files FROM attempts a")  # data files: an index file is not counted


class LedgerQueries:
    """Reading a ledger (mixed into :class:`~workbench.ledger.store.Ledger`)."""

    # -- reading -------------------------------------------------------------------------------

    def resolve_id(self, prefix: str) -> str:
        """The full attempt id for a unique prefix of at least 6 characters (like git)."""
        prefix = prefix.strip().lower()
        if len(prefix) < MIN_PREFIX:
            raise LedgerError(self.path, f"attempt id '{prefix}' too short: give at least {MIN_PREFIX} characters")
        rows = self._query("SELECT id FROM attempts WHERE substr(id, 1, ?) = ? LIMIT 2", (len(prefix), prefix))
        if not rows:
            raise LedgerError(self.path, f"no attempt with id '{prefix}'")
        if len(rows) > 1:
            raise LedgerError(self.path, f"attempt id '{prefix}' is ambiguous; give more characters")
        return rows[0]["id"]

    def attempt(self, attempt_id: str) -> dict[str, Any]:
        """One attempt as a dict (JSON columns decoded, campaign by name); accepts an id prefix."""
        full = self.resolve_id(attempt_id)
        self._reap_quietly()
        row = _decode_attempt(self._as_reaped(self._query(f"{_ATTEMPT_SELECT} WHERE a.id = ?", (full,)))[0])
        return _named(row, self.model_names())

    def attempts(self, campaign: str | None = None) -> pd.DataFrame:
        """All attempts (of one campaign), oldest first, with ``ceiling_fraction`` = gbps / ceiling;
        attempts whose runner died unfinished read as failed (interrupted), see :meth:`reap_abandoned`."""
        self._reap_quietly()
        where, args = ("WHERE c.name = ?", (campaign,)) if campaign else ("", ())
        rows = self._as_reaped(self._query(f"{_ATTEMPT_SELECT} {where} ORDER BY a.created, a.id", args))
        names = self.model_names()
        frame = _frame([_named(_decode_attempt(r), names) for r in rows],
                       ("campaign",) + schema.COLUMNS["attempts"] + _DERIVED)
        frame["ceiling_fraction"] = frame["gbps"].astype(float) / frame["ceiling_gbps"].astype(float)
        return frame

    def runs(self, attempt_id: str | None = None, campaign: str | None = None) -> pd.DataFrame:
        """Runs of one attempt (id prefix ok), of one campaign, or all; in attempt then position order."""
        return _frame(self._run_rows(attempt_id, campaign), schema.COLUMNS["runs"])

    def turns(self, attempt_id: str | None = None, campaign: str | None = None) -> pd.DataFrame:
        """Turns of one session attempt (id prefix ok), of one campaign, or all; in turn order."""
        rows = self._rows_of_attempts("turns", "t", attempt_id, campaign, "t.turn")
        for row in rows:
            row["extra"] = decode(row["extra"]) or {}
        return _frame(rows, schema.COLUMNS["turns"])

    def count_runs(self, campaign: str | None = None, since: str | None = None) -> int:
        """How many runs (of one campaign, recorded at or after the ISO time ``since``) the ledger
        holds: cheap enough to poll for a progress bar while another process records."""
        clauses, args = [], []
        if campaign:
            clauses.append("c.name = ?")
            args.append(campaign)
        if since:
            clauses.append("r.created >= ?")
            args.append(since)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._query("SELECT COUNT(*) AS n FROM runs r JOIN attempts a ON a.id = r.attempt_id"
                           f" JOIN campaigns c ON c.id = a.campaign_id {where}", tuple(args))
        return int(rows[0]["n"])

    def run_records(self, attempt_id: str) -> list[RunRecord]:
        """An attempt's runs back as :class:`RunRecord` objects (to re-derive statistics)."""
        return [RunRecord.from_json(row) for row in self._run_rows(attempt_id)]

    def attempt_stats(self, attempt_id: str) -> AttemptStats:
        """The statistics stored for an attempt (all None while it is still running)."""
        a = self.attempt(attempt_id)
        keys = AttemptStats.__dataclass_fields__
        values = {k: a[k] for k in keys}
        values.update(n=values["n"] or 0, n_failed=values["n_failed"] or 0, stable=bool(values["stable"]))
        return AttemptStats(**values)

    def campaigns(self) -> pd.DataFrame:
        """Campaigns with their attempt counts, oldest first."""
        rows = self._query(
            "SELECT c.*, COUNT(a.id) AS attempts FROM campaigns c LEFT JOIN attempts a ON a.campaign_id = c.id"
            " GROUP BY c.id ORDER BY c.created"
        )
        return _frame(rows, schema.COLUMNS["campaigns"] + ("attempts",))

    def ceilings(self, host: str | None = None) -> pd.DataFrame:
        """The latest measurement of each ceiling per host (one host when ``host`` is given)."""
        where, args = ("WHERE host = ?", (host,)) if host else ("", ())
        rows = self._query(
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY host, name ORDER BY measured_at DESC)"
            f" AS rank FROM ceilings {where}) WHERE rank = 1 ORDER BY host, name", args,
        )
        frame = _frame(rows, schema.COLUMNS["ceilings"])
        frame["detail"] = frame["detail"].map(decode)
        return frame

    def model_names(self) -> dict[tuple[str, str | None], str]:
        """(file_path, file_hash) → the model's name in this ledger: two identities never share one
        (a name several would share says the kind of file, how many and a short hash)."""
        return distinct_model_names((r["file_path"] or "", r["file_hash"], r["files"]) for r in self._query(_MODELS))

    def _reap_quietly(self) -> None:
        if self.readonly:  # read as interrupted by _as_reaped, never written so
            return
        try:  # a reader must still read a ledger it cannot write (locked, full disk)
            self.reap_abandoned()
        except (LedgerError, sqlite3.Error):
            pass

    def _as_reaped(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """On a read-only ledger: ``rows`` with every abandoned attempt as reaping would leave it."""
        if not self.readonly or not any(r["verdict"] == RUNNING for r in rows):
            return rows
        gone = abandoned(self._conn)
        for row in rows:
            if row["id"] in gone:
                row.update(interrupted_values(self._conn, row["id"], gone[row["id"]]))
        return rows

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        try:
            cur = self._conn.execute(sql, args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]
        except sqlite3.Error as exc:
            raise LedgerError(self.path, f"read failed: {exc}") from exc

    def _run_rows(self, attempt_id: str | None, campaign: str | None = None) -> list[dict[str, Any]]:
        rows = self._rows_of_attempts("runs", "r", attempt_id, campaign, "r.position, r.created")
        return [_decode_run(r) for r in rows]

    def _rows_of_attempts(self, table: str, alias: str, attempt_id: str | None, campaign: str | None,
                          order: str) -> list[dict[str, Any]]:
        """Rows of a per-attempt table (runs, turns) of one attempt, one campaign or all, in attempt order."""
        clauses, args = [], []
        if attempt_id:
            clauses.append(f"{alias}.attempt_id = ?")
            args.append(self.resolve_id(attempt_id))
        if campaign:
            clauses.append("c.name = ?")
            args.append(campaign)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._query(
            f"SELECT {alias}.* FROM {table} {alias} JOIN attempts a ON a.id = {alias}.attempt_id"
            f" JOIN campaigns c ON c.id = a.campaign_id {where} ORDER BY a.created, a.id, {order}", tuple(args))


def _decode_attempt(row: dict[str, Any]) -> dict[str, Any]:
    for key in ("params", "device_info", "environment"):
        row[key] = decode(row[key])
    row["stable"] = None if row["stable"] is None else bool(row["stable"])
    row["verdict_n"] = verdict_n(row["n"], row.get("baseline_n"), row["environment"])  # an A/B cell: its rounds
    row["verdict_text"] = format_verdict(row["verdict"], row["auto_verdict"], row["verdict_n"])
    row["baseline_across"] = row_across(row)
    for key in _BASE_FACTS:
        row.pop(f"baseline_{key}", None)
    return row


def _named(row: dict[str, Any], names: dict[tuple[str, str | None], str]) -> dict[str, Any]:
    path = row.get("file_path") or ""
    row["model"] = names.get((path, row.get("file_hash")), model_display_name(path) if path else "")
    return row


def _decode_run(row: dict[str, Any]) -> dict[str, Any]:
    for key in ("engaged", "phases", "result", "resident_files"):
        row[key] = decode(row.get(key))
    row["engaged"] = tuple(row["engaged"] or ())
    for key in ("cache_reached", "verified"):
        row[key] = None if row[key] is None else bool(row[key])
    return row


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    import pandas as pd  # imported here so writers (runner workers) never pay for pandas

    return pd.DataFrame.from_records(rows, columns=list(columns))
