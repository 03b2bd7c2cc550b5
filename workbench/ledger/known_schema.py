"""The schema objects a workbench ledger may hold, to check a ledger from elsewhere against before
SQLite evaluates anything in it.

SQLite evaluates what a schema says: ``PRAGMA integrity_check`` computes every expression index's
expression for every row, a view runs when read, a trigger or a CHECK constraint when written, a
generated column when read. A file from elsewhere may say anything (``PRAGMA writable_schema`` plants
an index on ``hex(zeroblob(450000000))`` in a 90 KB file), so before anything else its ``sqlite_master``
— every table, index, trigger and view, with its SQL — must be one this workbench writes: each object is
compared, by type, name, table and SQL text (whitespace runs read as one space, none beside brackets
and commas), with the objects of
every schema version, as a fresh ledger of that version writes them and as ledgers of older versions
migrate to them (``ALTER TABLE … ADD COLUMN`` rewrites the stored text). The objects are made here by
SQLite itself, in memory, from :data:`workbench.ledger.schema.DDL`: nothing is written twice.
"""
from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from itertools import chain, combinations

from workbench.ledger.schema import ADDED_COLUMNS, ADDED_TABLES, DDL, SCHEMA_VERSION

SchemaObject = tuple[str, str, str, "str | None"]  # (type, name, tbl_name, SQL with whitespace runs as one space)
OPTIONAL_TABLES = ("ledger_info",)  # ledgers of the first weeks of version 1 lack it; it holds one id


def normalized(sql: str | None) -> str | None:
    """SQL text with each run of whitespace read as one space, and none beside a bracket or a comma (a
    rewrapped DDL is the same schema)."""
    if sql is None:
        return None
    return re.sub(r"\s*([(),])\s*", r"\1", re.sub(r"\s+", " ", sql)).strip()


def schema_objects(conn: sqlite3.Connection) -> list[SchemaObject]:
    """Every object in ``conn``'s ``sqlite_master`` (which SQLite parses but does not evaluate)."""
    return [(str(t), str(n), str(tb), normalized(s))
            for t, n, tb, s in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")]


def unknown_objects(conn: sqlite3.Connection) -> list[SchemaObject]:
    """The objects of ``conn``'s schema that no version of this workbench's ledger holds."""
    known = known_objects()
    return [obj for obj in schema_objects(conn) if obj not in known]


def describe(obj: SchemaObject) -> str:
    """One object as a refusal shows it: its type, name and the start of its SQL."""
    kind, name, table, sql = obj
    text = (sql or "")[:80] + ("…" if sql and len(sql) > 80 else "")
    return f"{kind} {name!r} on {table!r}" + (f" ({text!r})" if sql else "")


@lru_cache(maxsize=1)
def known_objects() -> frozenset[SchemaObject]:
    """The objects of every version's ledger, fresh or brought to it from any older version by any
    sequence of workbenches that opened it (each opening applies its DDL, then its migrations)."""
    found: set[SchemaObject] = set()
    for created in range(1, SCHEMA_VERSION + 1):
        later = range(created + 1, SCHEMA_VERSION + 1)
        for opened in chain.from_iterable(combinations(later, k) for k in range(len(later) + 1)):
            conn = sqlite3.connect(":memory:", isolation_level=None)
            try:
                for statement in _creates(created):
                    conn.execute(statement)
                found.update(schema_objects(conn))
                for previous, version in zip((created,) + opened, opened):
                    _open_at(conn, previous, version)
                    found.update(schema_objects(conn))
            finally:
                conn.close()
    return frozenset(found)


def _creates(version: int) -> list[str]:
    """The CREATE statements of a ledger made at ``version``: today's DDL less what later versions added."""
    later_tables = {t for v, tables in ADDED_TABLES.items() if v > version for t in tables}
    later_columns = [(t, c, decl) for v, cols in ADDED_COLUMNS.items() if v > version for t, c, decl in cols]
    statements = []
    for statement in (normalized(s) or "" for s in DDL.format(version=version).split(";")):
        match = re.match(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)(?: ON (\w+))?", statement)
        if match is None or (match[2] or match[1]) in later_tables:
            continue  # the INSERTs, and tables a later version added
        for table, column, decl in later_columns:
            if match[1] == table:
                cut = statement.replace(f",{column} {normalized(decl)}", "")
                if cut == statement:
                    raise AssertionError(f"schema.DDL no longer declares {table}.{column} as {decl!r}")
                statement = cut
        statements.append(statement)
    return statements


def _open_at(conn: sqlite3.Connection, found: int, version: int) -> None:
    """What :func:`workbench.ledger.schema.connect` of ``version`` does to a ledger of version ``found``:
    its DDL's new tables, then ``migrate``'s ALTERs (whose stored text SQLite rewrites)."""
    for statement in _creates(version):
        conn.execute(statement)  # IF NOT EXISTS: only the tables this version added
    for step in range(found + 1, version + 1):
        for table, column, decl in ADDED_COLUMNS.get(step, ()):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
