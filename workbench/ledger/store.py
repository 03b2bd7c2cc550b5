"""The attempt ledger: campaigns, attempts, runs, ceilings and verdict edits in one SQLite file.

Every write is its own short transaction and runs are written one by one as they finish, so a runner
that dies half-way leaves every finished run recorded. Its attempt stays ``running`` until a reader
finds the process that recorded it gone (:mod:`workbench.ledger.owner`): reading attempts marks such
an attempt failed (interrupted), keeping its runs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from workbench.settings.defaults import host_id
from workbench.errors import LedgerError, ParamError
from workbench.ledger import schema
from workbench.ledger.owner import RUNNING, current_owner, reap_abandoned
from workbench.ledger.queries import LedgerQueries
from workbench.ledger.reading import connect_readonly
from workbench.ledger.schema import ATTEMPT_KINDS, encode, new_id, now, transaction, tristate
from workbench.records import (
    VERDICTS, AttemptStats, RunConfig, RunRecord, campaign_name_problem, keeping_needs_a_note,
)


class Ledger(LedgerQueries):
    """The attempt ledger at ``path`` (else ``$WORKBENCH_LEDGER``, else ``<data root>/ledger.sqlite``).

    Safe for several processes at once; use one ``Ledger`` per process (or thread).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True,
                 readonly: bool = False):
        """``create=False`` refuses a ledger that does not exist instead of making an empty one at a
        mistyped path; ``readonly=True`` (reading commands: list, show, export, reports) also changes
        nothing at all (:mod:`workbench.ledger.reading`): attempts whose runner is gone read as
        interrupted without being written so."""
        self.path: Path = schema.resolve_path(path)
        self.readonly = readonly
        if (readonly or not create) and not self.path.is_file():
            where = "" if self.path.parent.is_dir() else f" (and no directory {self.path.parent})"
            raise LedgerError(self.path, f"no ledger here{where}; check --ledger or $WORKBENCH_LEDGER "
                                         "(only commands that record create a ledger)")
        self._conn = connect_readonly(self.path) if readonly else schema.connect(self.path)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    @property
    def ledger_id(self) -> str:
        """This ledger file's own id, made with it: a deleted-and-recreated ledger gets a new one,
        so a sweep's resume can tell its points were recorded in *this* ledger."""
        return str(self._conn.execute("SELECT value FROM ledger_info WHERE key = 'ledger_id'").fetchone()[0])

    @property
    def schema_version(self) -> int:
        """The schema version of this ledger file."""
        return schema.ledger_version(self._conn, self.path)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    # -- writing -------------------------------------------------------------------------------

    def ensure_campaign(self, name: str, description: str = "") -> str:
        """The id of campaign ``name``, created when missing (a description fills an empty one)."""
        problem = campaign_name_problem(name)
        if problem is not None:
            raise LedgerError(self.path, problem)
        with transaction(self._conn, self.path) as c:
            c.execute("INSERT OR IGNORE INTO campaigns VALUES (?, ?, ?, ?)", (new_id(), name, description, now()))
            if description:
                c.execute("UPDATE campaigns SET description = ? WHERE name = ? AND description = ''", (description, name))
            return c.execute("SELECT id FROM campaigns WHERE name = ?", (name,)).fetchone()[0]

    def start_attempt(
        self, *, campaign: str, config: RunConfig, cache: str, hypothesis: str = "", label: str = "",
        file_identity: Mapping[str, Any] | None = None, environment: Mapping[str, Any] | None = None,
        device_info: Mapping[str, Any] | None = None, host: str | None = None, kind: str = "strategy",
        binary: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a new attempt (verdict ``running``) before its first run; returns its id.

        ``kind`` is what is measured (:data:`ATTEMPT_KINDS`); ``binary`` the identity (``path``,
        ``hash``) of the executable an external engine ran. The calling process is recorded as the
        attempt's owner (``environment.runner``), so a reader can tell when it died unfinished."""
        if kind not in ATTEMPT_KINDS:
            raise LedgerError(self.path, f"unknown attempt kind '{kind}'; known: {', '.join(ATTEMPT_KINDS)}")
        campaign_id = self.ensure_campaign(campaign or "default")
        ident = dict(file_identity or {})
        host = host or (environment or {}).get("host") or host_id()
        row = {
            "id": new_id(), "host": host, "campaign_id": campaign_id,
            "label": label or config.display, "hypothesis": hypothesis, "strategy": config.strategy,
            "params": encode(dict(config.params)), "device": config.device,
            "device_info": encode(dict(device_info) if device_info is not None else None),
            "file_path": ident.get("path", config.file), "file_size": ident.get("size"),
            "file_hash": ident.get("hash"), "cache": cache,
            "environment": encode({**(environment or {}), "runner": current_owner().to_json()}),
            "verdict": RUNNING, "notes": "", "created": now(), "kind": kind,
            "binary_path": (binary or {}).get("path"), "binary_hash": (binary or {}).get("hash"),
        }
        self._insert("attempts", row)
        return row["id"]

    def describe_attempt(self, attempt_id: str, *, device_info: Mapping[str, Any] | None = None,
                         binary: Mapping[str, Any] | None = None,
                         environment: Mapping[str, Any] | None = None) -> None:
        """Add what an attempt's first run reported to the attempt opened before it: the device the
        worker opened, an engine's build, keys of its environment (an attempt is recorded before its
        first run, so a runner killed during that run leaves it, read as interrupted)."""
        sets, args = [], []
        if device_info is not None:
            sets.append("device_info = ?")
            args.append(encode(dict(device_info)))
            environment = {**(environment or {}), "device": dict(device_info)}
        if environment:  # one json_set for every key: one column assigned twice keeps only the last
            sets.append(f"environment = json_set(coalesce(environment, '{{}}'){', ?, json(?)' * len(environment)})")
            args += [x for key, value in environment.items() for x in (f"$.{key}", encode(value))]
        if binary is not None and binary.get("hash"):
            sets.append("binary_path = ?, binary_hash = ?")
            args += [binary.get("path"), binary.get("hash")]
        if sets:
            with transaction(self._conn, self.path) as c:
                c.execute(f"UPDATE attempts SET {', '.join(sets)} WHERE id = ?", (*args, attempt_id))

    def add_run(self, attempt_id: str, run: RunRecord) -> str:
        """Record one finished (or failed) run of an attempt at once; returns the run's id."""
        row = {
            "id": new_id(), "attempt_id": attempt_id, "position": run.position, "pid": run.pid,
            "load_s": run.load_s, "wall_s": run.wall_s, "bytes": run.bytes,
            "resident_before": run.resident_before, "cache_state": run.cache_state,
            "cache_reached": tristate(run.cache_reached), "verified": tristate(run.verified),
            "engaged": encode(list(run.engaged)), "phases": encode(dict(run.phases)),
            "minflt": run.minflt, "majflt": run.majflt, "lock_wait_s": run.lock_wait_s,
            "error": run.error, "result": encode(run.report.to_json()), "created": now(),
            "resident_files": encode(dict(run.resident_files)),
        }
        self._require_attempt(attempt_id)
        self._insert("runs", row)
        return row["id"]

    def finish_attempt(
        self, attempt_id: str, stats: AttemptStats, *, baseline_id: str | None, speedup: float | None,
        verdict: str, ceiling_name: str | None = None, ceiling_gbps: float | None = None, notes: str = "",
        cache: str | None = None, ci: tuple[float | None, float | None] = (None, None),
        verdict_reason: str = "",
    ) -> None:
        """Store an attempt's statistics, comparison and automatic verdict; ``cache`` replaces the
        label recorded at the start once all runs are in (a state reached by the first run only
        must not stay labelled as reached)."""
        _check_verdict(self.path, verdict)
        values = (
            stats.n, stats.n_failed, stats.median_s, stats.min_s, stats.max_s, stats.spread_pct,
            stats.gbps, int(stats.stable), ceiling_name, ceiling_gbps, baseline_id, speedup,
            verdict, verdict, notes, now(), ci[0], ci[1], verdict_reason, attempt_id,
        )
        with transaction(self._conn, self.path) as c:
            cur = c.execute(
                "UPDATE attempts SET n=?, n_failed=?, median_s=?, min_s=?, max_s=?, spread_pct=?, gbps=?,"
                " stable=?, ceiling_name=?, ceiling_gbps=?, baseline_id=?, speedup=?, verdict=?,"
                " auto_verdict=?, notes=?, finished=?, ci_low=?, ci_high=?, verdict_reason=? WHERE id=?", values,
            )
            if cur.rowcount != 1:
                raise LedgerError(self.path, f"no attempt '{attempt_id}' to finish")
            if cache is not None:
                c.execute("UPDATE attempts SET cache=? WHERE id=?", (cache, attempt_id))

    def relabel_cache(self, attempt_id: str, cache: str) -> None:
        """Replace an attempt's cache label while it runs: a state a later run missed must not stay
        labelled as reached until the attempt finishes (or forever, if its runner dies)."""
        with transaction(self._conn, self.path) as c:
            c.execute("UPDATE attempts SET cache = ? WHERE id = ?", (cache, attempt_id))

    def add_turn(self, attempt_id: str, turn: Mapping[str, Any]) -> str:
        """Record one turn of a long session (``kind='session'``): the columns of the ``turns`` table
        from ``turn``'s keys, everything else kept in ``extra`` as JSON; returns the row's id."""
        cols = schema.COLUMNS["turns"]
        row = {k: turn.get(k) for k in cols if k not in ("id", "attempt_id", "extra", "created")}
        if row["turn"] is None:
            raise LedgerError(self.path, "a turn needs its number ('turn')")
        extra = {k: v for k, v in turn.items() if k not in cols}
        row.update(id=new_id(), attempt_id=attempt_id, extra=encode(extra), created=now())
        self._require_attempt(attempt_id)
        self._insert("turns", row)
        return row["id"]

    def set_verdict(self, attempt_id: str, verdict: str, note: str = "") -> str:
        """A person's verdict (``kept``, ``reverted``, ``reference`` …), audited; returns the full id.
        ``kept`` on an attempt that measured no claim (inconclusive, slower, failed, or faster from fewer
        than 5 runs a side) needs ``note``: a ParamError otherwise."""
        _check_verdict(self.path, verdict)
        full = self.resolve_id(attempt_id)
        if verdict == "kept" and not note.strip():
            a = self.attempt(full)
            why = keeping_needs_a_note(a["auto_verdict"], a["verdict_n"])
            if why:
                raise ParamError("ledger verdict", "note", f"attempt {full[:8]} measured {why}: keeping it "
                                 "needs a note saying why (--note \"…\")")
        at = now()
        with transaction(self._conn, self.path) as c:
            old, notes = c.execute("SELECT verdict, notes FROM attempts WHERE id = ?", (full,)).fetchone()
            line = f"{at[:16]}Z verdict {old} → {verdict}" + (f": {note}" if note else "")
            notes = f"{notes}\n{line}" if notes else line
            c.execute("UPDATE attempts SET verdict = ?, notes = ? WHERE id = ?", (verdict, notes, full))
            c.execute(
                "INSERT INTO verdict_history VALUES (?, ?, ?, ?, ?, ?)", (new_id(), full, old, verdict, note, at)
            )
        return full

    def record_ceiling(self, name: str, gbps: float, detail: Mapping[str, Any], host: str | None = None) -> str:
        """Store one measured bandwidth wall of a host (e.g. ``page_cache_read_8t``); returns its id."""
        row = {
            "id": new_id(), "host": host or host_id(), "name": name, "gbps": float(gbps),
            "detail": encode(dict(detail)), "measured_at": now(),
        }
        self._insert("ceilings", row)
        return row["id"]

    def reap_abandoned(self) -> list[str]:
        """Mark failed (interrupted) every ``running`` attempt whose recording process is gone; its runs
        stay. Returns their ids. An owner on another host, or none recorded, is left alone."""
        return reap_abandoned(self._conn, self.path)

    def merge(self, other_path: str | os.PathLike[str]) -> dict[str, int]:
        """Import another ledger (another machine's); returns rows added per table. Idempotent."""
        from workbench.ledger.merge import merge_into

        return merge_into(self._conn, self.path, Path(other_path))

    # -- internals -----------------------------------------------------------------------------

    def _insert(self, table: str, row: Mapping[str, Any]) -> None:
        names = ", ".join(row)
        marks = ", ".join("?" * len(row))
        with transaction(self._conn, self.path) as c:
            c.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(row.values()))

    def _require_attempt(self, attempt_id: str) -> None:
        if not self._query("SELECT 1 FROM attempts WHERE id = ?", (attempt_id,)):
            raise LedgerError(self.path, f"no attempt '{attempt_id}' (runs need the full attempt id)")


def _check_verdict(path: Path, verdict: str) -> None:
    if verdict not in VERDICTS:
        raise LedgerError(path, f"unknown verdict '{verdict}'; known: {', '.join(VERDICTS)}")


