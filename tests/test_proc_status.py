"""workbench.io.proc_status: the one reader of /proc/<pid>/status fields (kB → bytes)."""
from __future__ import annotations

import os

from workbench.io.own_pages import vmlck_bytes
from workbench.io.proc_status import status_bytes


def test_a_field_in_kb_comes_back_in_bytes_and_a_missing_or_broken_one_as_none(tmp_path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmRSS:\t  1234 kB\nVmLck:\t0 kB\nRssFile:\tbroken kB\nVmHWM:\n", encoding="ascii")
    assert status_bytes("VmRSS", str(status)) == 1234 * 1024
    assert status_bytes("VmLck", str(status)) == 0  # zero is a value, not a missing field
    assert status_bytes("VmSwap", str(status)) is None
    assert status_bytes("RssFile", str(status)) is None and status_bytes("VmHWM", str(status)) is None
    assert status_bytes("VmRSS", str(tmp_path / "gone")) is None
    assert vmlck_bytes(str(status)) == 0 and vmlck_bytes(str(tmp_path / "gone")) == -1


def test_this_process_has_a_resident_set() -> None:
    rss = status_bytes("VmRSS")
    assert rss is not None and rss > 1 << 20 and status_bytes("VmRSS", f"/proc/{os.getpid()}/status") > 0
