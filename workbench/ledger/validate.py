"""Checks on a ledger from elsewhere before any of it is merged.

A merged ledger's rows become part of this machine's history, so they are held to what this
workbench itself writes: the same schema version and columns, intact SQLite pages, ids that are
unique and references that resolve, verdicts and cache states from the known sets, times and rates
that are finite and not negative, JSON where a column holds JSON, campaign names that are no path, text
within its size bound and no time in the future (:mod:`workbench.ledger.limits`). The first problem found (and
how many more there are) is one :class:`LedgerError` line naming the file; nothing is merged.

The checks run on a snapshot of the file (SQLite's backup API, into a private temporary database,
:mod:`workbench.ledger.foreign`), and the merge reads that same snapshot, so a file that changes after
it was checked cannot slip anything past them. The first check is the schema itself — every table,
index, trigger and view with its SQL (:mod:`workbench.ledger.known_schema`) — because SQLite evaluates
what a schema says (``integrity_check`` computes every index expression); nothing is evaluated before it.
"""
from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterable

from workbench.errors import LedgerError
from workbench.ledger.foreign import MAX_VALUE
from workbench.ledger.known_schema import describe, unknown_objects
from workbench.ledger.limits import oversized, time_problem
from workbench.ledger.schema import ATTEMPT_KINDS, SCHEMA_VERSION, columns_at
from workbench.records import AUTO_VERDICTS, CACHE_STATES, VERDICTS, campaign_name_problem

Rule = Callable[[Any], "str | None"]  # a value → what is wrong with it, or None
MAX_REPORTED = 1000  # stop counting problems after this many; one is enough to refuse


def check_ledger(conn: sqlite3.Connection, shown: Path, target: sqlite3.Connection) -> None:
    """Refuse (LedgerError naming ``shown``) a snapshot ``conn`` that this workbench would not have written."""
    try:
        _check_objects(conn, shown)
        _check_pages(conn, shown)
        version = _read_version(conn, shown)
        _check_columns(conn, shown, version)
        problems = list(_value_problems(conn, target, version))
    except sqlite3.DataError as exc:  # SQLITE_TOOBIG: a value past foreign.MAX_VALUE, never loaded
        raise LedgerError(shown, f"holds a value larger than {MAX_VALUE:,} bytes, far more than any column "
                                 f"of a ledger ({exc}); nothing merged") from exc
    except sqlite3.DatabaseError as exc:
        raise LedgerError(shown, f"not a readable SQLite ledger: {exc}; nothing merged") from exc
    if problems:
        more = f"; {len(problems) - 1}{'+' if len(problems) >= MAX_REPORTED else ''} more problem(s)" \
            if len(problems) > 1 else ""
        raise LedgerError(shown, f"{problems[0]}{more}; nothing merged")


def _check_objects(conn: sqlite3.Connection, shown: Path) -> None:
    """Every table, index, trigger and view one a ledger holds, before SQLite evaluates any of them.

    Where one is not, a table of a known name whose columns differ is named with its columns (the
    version is read first: ``schema_version``'s own object is then known, nothing else is evaluated)."""
    unknown = unknown_objects(conn)
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone():
        raise LedgerError(shown, "not a workbench ledger (no schema_version table); nothing merged")
    if not unknown:
        return
    if all(obj[:2] != ("table", "schema_version") for obj in unknown):
        _check_columns(conn, shown, _read_version(conn, shown))
    more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
    raise LedgerError(shown, f"schema: {describe(unknown[0])}{more} is not part of a workbench ledger; "
                             "nothing merged (nothing in it was evaluated)")


def _check_pages(conn: sqlite3.Connection, shown: Path) -> None:
    rows = [r[0] for r in conn.execute("PRAGMA integrity_check(5)")]
    if rows != ["ok"]:
        found = "; ".join(str(r) for r in rows).replace("\n", "; ")  # SQLite's report spans lines
        raise LedgerError(shown, f"corrupt SQLite file: {found[:300]}; nothing merged")


def _read_version(conn: sqlite3.Connection, shown: Path) -> int:
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    if len(versions) != 1 or not isinstance(versions[0], int) or versions[0] not in range(1, SCHEMA_VERSION + 1):
        raise LedgerError(shown, f"ledger schema version {versions[:3]}; this workbench merges one of "
                                 f"{list(range(1, SCHEMA_VERSION + 1))}; nothing merged")
    return versions[0]


def _check_columns(conn: sqlite3.Connection, shown: Path, version: int) -> None:
    """The tables and columns (generated and hidden ones included) are exactly ``version``'s."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in columns_at(version).items():
        if table not in tables:
            raise LedgerError(shown, f"schema: table '{table}' is missing; nothing merged")
        found = [r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})")]
        missing, extra = set(columns) - set(found), set(found) - set(columns)
        if missing or extra:
            raise LedgerError(shown, f"schema: table '{table}' lacks {sorted(missing)} / has unknown "
                                     f"{sorted(extra)}; nothing merged")


# -- value rules -----------------------------------------------------------------------------------

def _text(nonempty: bool = False, null: bool = False) -> Rule:
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "is NULL"
        if not isinstance(v, str):
            return f"is {type(v).__name__}, not text"
        return "is empty" if nonempty and not v.strip() else None
    return rule


def _number(lo: float = 0.0, hi: float = math.inf, integer: bool = False, null: bool = True) -> Rule:
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "is NULL"
        if not isinstance(v, int if integer else (int, float)):
            return f"is {type(v).__name__}, not {'an integer' if integer else 'a number'}"
        if not math.isfinite(v) or not lo <= v <= hi:
            return f"is outside [{lo:g}, {hi:g}]"
        return None
    return rule


def _one_of(values: Iterable[str], null: bool = False, prefix: bool = False) -> Rule:
    known = tuple(values)

    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "is NULL"
        ok = isinstance(v, str) and (v.startswith(known) if prefix else v in known)
        return None if ok else f"is not one of {', '.join(known)}"
    return rule


def _json(kind: type, null: bool = True) -> Rule:
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "is NULL"
        try:
            value = json.loads(v) if isinstance(v, str) else None
        except ValueError:
            value = None
        return None if isinstance(value, kind) else f"is not a JSON {kind.__name__}"
    return rule


def _fractions() -> Rule:
    """A JSON object of name → fraction in [0, 1] (each file's resident fraction), or NULL."""
    def rule(v: Any) -> str | None:
        if v is None:
            return None
        try:
            value = json.loads(v) if isinstance(v, str) else None
        except ValueError:
            value = None
        if not isinstance(value, dict):
            return "is not a JSON dict"
        bad = [k for k, f in value.items() if isinstance(f, bool) or not isinstance(f, (int, float))
               or not math.isfinite(f) or not 0 <= f <= 1]
        return f"holds {bad[0]!r}, not a fraction in [0, 1]" if bad else None
    return rule


def _time(null: bool = False) -> Rule:
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "is NULL"
        return time_problem(v)
    return rule


def _campaign_name(v: Any) -> str | None:
    problem = campaign_name_problem(v)
    return None if problem is None else f"is not a usable campaign name: {problem}"


_ID, _NAME, _TXT, _OPT = _text(nonempty=True), _text(nonempty=True), _text(), _text(null=True)
_SECONDS, _COUNT, _FLAG = _number(), _number(integer=True), _number(0, 1, integer=True)
_STATES = VERDICTS + ("running",)
RULES: dict[str, dict[str, Rule]] = {
    "campaigns": {"id": _ID, "name": _campaign_name, "description": _TXT, "created": _time()},
    "attempts": {
        "id": _ID, "host": _NAME, "campaign_id": _ID, "label": _TXT, "hypothesis": _TXT, "strategy": _NAME,
        "params": _json(dict, null=False), "device": _OPT, "device_info": _json(dict), "file_path": _OPT,
        "file_size": _COUNT, "file_hash": _OPT, "cache": _one_of(CACHE_STATES, null=True, prefix=True),
        "environment": _json(dict), "n": _COUNT, "n_failed": _COUNT, "median_s": _SECONDS, "min_s": _SECONDS,
        "max_s": _SECONDS, "spread_pct": _SECONDS, "gbps": _SECONDS, "stable": _FLAG, "ceiling_name": _OPT,
        "ceiling_gbps": _SECONDS, "baseline_id": _OPT, "speedup": _number(lo=1e-300), "verdict": _one_of(_STATES),
        "auto_verdict": _one_of(AUTO_VERDICTS + ("running",), null=True), "notes": _TXT, "created": _time(),
        "finished": _time(null=True), "kind": _one_of(ATTEMPT_KINDS), "ci_low": _number(lo=1e-300),
        "ci_high": _number(lo=1e-300), "verdict_reason": _TXT, "binary_path": _OPT, "binary_hash": _OPT,
    },
    "runs": {
        "id": _ID, "attempt_id": _ID, "position": _COUNT, "pid": _COUNT, "load_s": _SECONDS, "wall_s": _SECONDS,
        "bytes": _COUNT, "resident_before": _number(0, 1), "cache_state": _one_of(CACHE_STATES, null=True),
        "cache_reached": _FLAG, "verified": _FLAG, "engaged": _json(list), "phases": _json(dict),
        "minflt": _COUNT, "majflt": _COUNT, "lock_wait_s": _SECONDS, "error": _OPT, "result": _json(dict),
        "created": _time(), "resident_files": _fractions(),
    },
    "ceilings": {"id": _ID, "host": _NAME, "name": _NAME, "gbps": _number(null=False), "detail": _json(dict),
                 "measured_at": _time()},
    "verdict_history": {"id": _ID, "attempt_id": _ID, "old": _one_of(_STATES, null=True), "new": _one_of(_STATES),
                        "note": _TXT, "at": _time()},
    "turns": {
        "id": _ID, "attempt_id": _ID, "turn": _number(integer=True, null=False), "tokens": _COUNT,
        "bytes_read": _COUNT, "hits": _COUNT, "misses": _COUNT, "evictions": _COUNT, "minflt": _COUNT,
        "majflt": _COUNT, "accounted_bytes": _COUNT, "actual_anon_bytes": _COUNT,
        "unreleased_pages": _COUNT, "seconds": _SECONDS, "tokens_per_s": _SECONDS, "extra": _json(dict),
        "created": _time(),
    },
}
# (table, column) → the table its values must name a row of (None allowed where the column is nullable)
REFERENCES = {("attempts", "campaign_id"): "campaigns", ("runs", "attempt_id"): "attempts",
              ("verdict_history", "attempt_id"): "attempts", ("attempts", "baseline_id"): "attempts",
              ("turns", "attempt_id"): "attempts"}


def _value_problems(conn: sqlite3.Connection, target: sqlite3.Connection, version: int) -> Iterable[str]:
    """Every row's every column against its rule, then uniqueness and references; stops at MAX_REPORTED."""
    found = 0
    for problem in _all_problems(conn, target, columns_at(version)):
        yield problem
        found += 1
        if found >= MAX_REPORTED:
            return


def _all_problems(conn: sqlite3.Connection, target: sqlite3.Connection,
                  columns: dict[str, tuple[str, ...]]) -> Iterable[str]:
    sizes = [p for table, rules in RULES.items() if table in columns
             for p in oversized(conn, table, [c for c in rules if c in columns[table]])]
    if sizes:  # refused before any value is loaded
        yield from sizes
        return
    ids = {t: {r[0] for r in conn.execute(f"SELECT id FROM {t}")} for t in ("campaigns", "attempts")}
    ours = {r[0] for r in target.execute("SELECT id FROM main.attempts")}
    for table, all_rules in RULES.items():
        if table not in columns:
            continue
        rules = {c: rule for c, rule in all_rules.items() if c in columns[table]}
        for (dup,) in conn.execute(f"SELECT id FROM {table} GROUP BY id HAVING COUNT(*) > 1"):
            yield f"{table}: id {_show(dup)} appears more than once"
        cols = list(rules)
        for row in conn.execute(f"SELECT {', '.join(cols)} FROM {table}"):
            values = dict(zip(cols, row))
            for col, rule in rules.items():
                why = rule(values[col])
                if why is None:
                    why = _dangling(table, col, values[col], ids, ours)
                if why is not None:
                    yield f"{table}.{col} {why} (value {_show(values[col])}, row id {_show(values['id'])})"
    yield from _campaign_clashes(conn, target)


def _dangling(table: str, col: str, value: Any, ids: dict[str, set[str]], ours: set[str]) -> str | None:
    refers = REFERENCES.get((table, col))
    if refers is None or value is None or value in ids[refers]:
        return None
    if col == "baseline_id" and value in ours:  # a baseline measured here and merged over there: fine
        return None
    return f"names a missing {refers[:-1]}"


def _campaign_clashes(conn: sqlite3.Connection, target: sqlite3.Connection) -> Iterable[str]:
    """A campaign id that means another campaign name here would orphan the attempts merged into it."""
    ours = dict(target.execute("SELECT id, name FROM main.campaigns").fetchall())
    for cid, name in conn.execute("SELECT id, name FROM campaigns"):
        if cid in ours and ours[cid] != name:
            yield f"campaigns.id {_show(cid)} is campaign {_show(name)} there but {_show(ours[cid])} here"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
