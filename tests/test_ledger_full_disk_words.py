"""A ledger SQLite cannot open for want of room says the file system is full, with the bytes free: SQLite's
own words for it are "disk I/O error" (issue 24's left-open wording)."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

import workbench.ledger.schema as schema
from workbench.errors import LedgerError


def test_a_ledger_on_a_full_file_system_says_so_with_the_bytes_free(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)  # SQLite refuses it: the refusal gets the hint
    real = os.statvfs(tmp_path)
    monkeypatch.setattr(schema.os, "statvfs", lambda p: SimpleNamespace(f_bavail=3, f_frsize=real.f_frsize))
    with pytest.raises(LedgerError) as full:
        schema.connect(path)
    assert f"is full: {3 * real.f_frsize:,} bytes free" in str(full.value) and "\n" not in str(full.value)
    monkeypatch.setattr(schema.os, "statvfs", lambda p: real)  # room enough: no word about the disk
    with pytest.raises(LedgerError) as roomy:
        schema.connect(path)
    assert "is full" not in str(roomy.value) and "not a usable ledger" in str(roomy.value)
