"""The soak (benchmarks/hardening/soak_ledger.py) at CI size: two runners into one ledger, a few attempts each."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "hardening" / "soak_ledger.py"


@pytest.fixture(scope="module")
def soak_module():
    spec = importlib.util.spec_from_file_location("soak_ledger", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak_ledger"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("soak_ledger", None)


def test_concurrent_runners_lose_no_row_and_hold_nothing_more(soak_module, tmp_path):
    result = soak_module.soak(2, 8, tmp_path, rss_at=3)
    assert result.attempts_started == 16 and not any(r.errors for r in result.runners)
    assert result.rows_lost == 0 and result.attempts_in_ledger == 16 and result.runs_in_ledger == 16
    assert result.integrity == "ok" and result.still_running == 0
    assert result.fd_growth <= 0, result.runners
    assert result.rss_growth_kib <= 8 << 10, result.runners  # a few MiB at most, as in the recorded soak
    text = soak_module.summary(result, (0.0, 0.0, 0.0))
    assert "rows lost: **0**" in text and "integrity_check: **ok**" in text
