"""CSV traces: rows ``token,layer,expert`` (a header line naming them is optional), read in chunks by
pandas, every cell checked to be a non-negative integer within the limits before it becomes one, and
no line longer than :data:`~workbench.expert.traces.limits.MAX_LINE_BYTES` (a file of one endless line
is refused as it streams, never held)."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd

from workbench.errors import TraceError, printable
from workbench.expert.traces.build import trace_from_rows
from workbench.expert.traces.limits import MAX_EXPERTS, MAX_LAYER, MAX_LINE_BYTES, MAX_POSITION, check_ids
from workbench.expert.traces.trace import Trace

_COLUMNS = ("token", "layer", "expert")
_LIMITS = (MAX_POSITION, MAX_LAYER, MAX_EXPERTS)
_CHUNK_ROWS = 1 << 18
_INTEGER = r"[0-9]+"
_DIGITS = 18  # fit an int64: a longer number is out of range before anything converts it


def read_csv(path: str) -> Trace:
    """The trace in ``path``; :class:`TraceError` (one line) for anything else.

    A well-formed file is parsed as integers by pandas' C parser in one pass; anything it refuses or
    holds out of range is read again cell by cell as text, which names the line and the problem."""
    try:
        table = _read(path, fast=True)
    except _NotPlain:
        table = _read(path, fast=False)
    return trace_from_rows(path, table[:, 0], table[:, 1], table[:, 2])


class _NotPlain(Exception):
    """The fast pass met something only the careful pass can name."""


def _read(path: str, *, fast: bool) -> np.ndarray:
    parts: list[np.ndarray] = []
    rows = 0
    try:
        with open(path, "rb") as fh:
            first = fh.readline(MAX_LINE_BYTES)
            header = [c.strip().lower() for c in first.decode("utf-8").split(",")] == list(_COLUMNS)
            fh.seek(0)
            options = (dict(dtype=np.int64, skip_blank_lines=True, skiprows=int(header))
                       if fast else dict(dtype=str, skip_blank_lines=False, na_filter=False))
            digits_from = (len(first) if header else 0) if fast else None
            for chunk in pd.read_csv(io.BufferedReader(_BoundedLines(path, fh, digits_from)), header=None,
                                     chunksize=_CHUNK_ROWS,
                                     encoding="utf-8", engine="c", **options):
                block = _plain(chunk) if fast else _checked(path, chunk)
                rows += len(block)
                check_ids(path, "rows", rows)
                parts.append(block)
    except pd.errors.EmptyDataError:
        pass
    except (pd.errors.ParserError, ValueError, OverflowError) as exc:
        if fast and not isinstance(exc, UnicodeDecodeError):
            raise _NotPlain from None
        if isinstance(exc, UnicodeDecodeError):
            raise TraceError(path, f"cannot read: {exc}") from None
        detail = str(exc).rpartition("error: ")[2] or str(exc)
        raise TraceError(path, f"not a token,layer,expert CSV: {printable(detail)}") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    return np.concatenate(parts) if parts else np.zeros((0, 3), np.int64)


def _plain(chunk: pd.DataFrame) -> np.ndarray:
    """A chunk the C parser read as integers, if every value is in range (else the careful pass names it)."""
    values = chunk.to_numpy()
    if values.shape[1] != 3 or values.dtype != np.int64 or (values < 0).any() or \
            any((values[:, c] >= limit).any() for c, limit in enumerate(_LIMITS)):
        raise _NotPlain
    return values


class _BoundedLines(io.RawIOBase):
    """The file's bytes as pandas reads them, refused once a line runs past the limit."""

    def __init__(self, path: str, fh: io.BufferedReader, digits_from: int | None = None) -> None:
        super().__init__()
        self.path, self.fh, self.run, self.digits_from, self.seen = path, fh, 0, digits_from, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = self.fh.readinto(buffer)
        if n:
            data = bytes(memoryview(buffer)[:n])
            if self.digits_from is not None:  # the fast pass: digits and separators only (no 1e3, +5, 2.0)
                if data[max(0, self.digits_from - self.seen):].translate(None, b"0123456789,\r\n \t"):
                    raise _NotPlain
                self.seen += n
            cut = data.rfind(b"\n")
            self.run = n - cut - 1 if cut >= 0 else self.run + n
            if self.run > MAX_LINE_BYTES:
                raise TraceError(self.path, f"a line longer than {MAX_LINE_BYTES:,} bytes: not a token,layer,expert CSV")
        return n


def _checked(path: str, chunk: pd.DataFrame) -> np.ndarray:
    """The chunk's rows as int64, blank lines and a first-line header dropped."""
    if chunk.shape[1] != 3:
        line = int(chunk.index[0]) + 1
        raise TraceError(path, f"line {line}: expected three non-negative integers token,layer,expert; "
                               f"got {chunk.shape[1]} fields")
    cells = chunk.apply(lambda col: col.str.strip())
    blank = (cells == "").all(axis=1)
    if chunk.index[0] == 0 and [c.lower() for c in cells.iloc[0]] == list(_COLUMNS):
        blank.iloc[0] = True
    ok = cells.apply(lambda col: col.str.fullmatch(_INTEGER)).all(axis=1) | blank
    if not ok.all():
        line = int(ok.index[~ok.to_numpy()][0])
        got = printable(",".join(chunk.loc[line]))[:200]
        raise TraceError(path, f"line {line + 1}: expected three non-negative integers token,layer,expert; "
                               f"got {got!r}")
    kept = cells[~blank]
    for c, name in enumerate(_COLUMNS):
        long = np.flatnonzero(kept[c].str.lstrip("0").str.len().to_numpy() > _DIGITS)
        if len(long):
            raise TraceError(path, f"line {int(kept.index[long[0]]) + 1}: {name} {kept[c].iloc[long[0]][:40]} "
                                   f"out of range (0 .. {_LIMITS[c] - 1})")
    values = kept.to_numpy().astype(np.int64).reshape(-1, 3)
    for c, (name, limit) in enumerate(zip(_COLUMNS, _LIMITS)):
        over = np.flatnonzero(values[:, c] >= limit)
        if len(over):
            line = int(kept.index[over[0]]) + 1
            raise TraceError(path, f"line {line}: {name} {int(values[over[0], c])} out of range (0 .. {limit - 1})")
    return values
