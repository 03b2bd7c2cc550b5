"""One place for every WORKBENCH_* default: getters read the environment, set_* scope it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.settings import defaults
from workbench.errors import ParamError


def test_data_root_finds_the_checkout_from_a_subdirectory(tmp_path, monkeypatch):
    monkeypatch.delenv(defaults.DATA, raising=False)
    monkeypatch.delenv(defaults.LEDGER, raising=False)
    checkout = tmp_path / "repo"
    (checkout / "workbench").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    (checkout / "notebooks").mkdir()
    monkeypatch.chdir(checkout / "notebooks")
    assert defaults.data_root() == checkout / "data"
    assert defaults.ledger_path() == checkout / "data" / "ledger.sqlite"
    monkeypatch.chdir(checkout)  # at the root: the same place, said relative as the CLI prints it
    assert defaults.data_root() == Path("data") and defaults.runs_dir() == Path("data/runs")
    monkeypatch.chdir(tmp_path)  # outside any checkout: ./data
    assert defaults.data_root() == Path("data") and defaults.reports_dir() == Path("data/reports")


def test_set_scopes_the_variable_and_restores_it(tmp_path, monkeypatch):
    monkeypatch.setenv(defaults.LEDGER, str(tmp_path / "outer.sqlite"))
    with defaults.set_ledger_path(tmp_path / "inner.sqlite"):
        assert defaults.ledger_path() == tmp_path / "inner.sqlite"
        with defaults.set_ledger_path(None):  # unset: back to the data root
            assert defaults.ledger_path(tmp_path) == tmp_path / "ledger.sqlite"
    assert defaults.ledger_path() == tmp_path / "outer.sqlite"
    monkeypatch.delenv(defaults.HOST, raising=False)
    with defaults.set_host("apu-rig"), defaults.set_lock_dir(tmp_path / "l"), defaults.set_cache_dir(tmp_path / "c"):
        assert defaults.host_id() == "apu-rig" and defaults.lock_dir() == tmp_path / "l"
        assert defaults.cache_dir() == tmp_path / "c"
    assert defaults.host_id().startswith(socket.gethostname()) and defaults.HOST not in os.environ


def test_set_reaches_worker_processes(monkeypatch):
    """The override lives in the environment, so a process started inside the block sees it."""
    monkeypatch.delenv(defaults.PAGE_EVICTION, raising=False)
    code = "from workbench.settings import defaults; print(defaults.page_eviction(), defaults.batch())"
    with defaults.set_page_eviction(True), defaults.set_batch(True):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"] and defaults.page_eviction() is None and not defaults.batch()


@pytest.mark.parametrize("raw, want", [("1", True), ("on", True), (" 0 ", False), ("no", False), ("", None)])
def test_page_eviction_values(monkeypatch, raw, want):
    monkeypatch.setenv(defaults.PAGE_EVICTION, raw)
    assert defaults.page_eviction() is want


def test_page_eviction_refuses_nonsense(monkeypatch):
    monkeypatch.setenv(defaults.PAGE_EVICTION, "sometimes")
    with pytest.raises(ParamError, match=defaults.PAGE_EVICTION):
        defaults.page_eviction()


def test_no_module_reads_workbench_variables_itself():
    """Every WORKBENCH_* variable is read in the settings room (settings/), nowhere else in the package."""
    settings = Path(defaults.__file__).resolve().parent
    package = settings.parent
    offenders = [f"{p.relative_to(package)}:{i}" for p in package.rglob("*.py") if p.parent != settings
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if ("environ" in line or "getenv" in line) and "WORKBENCH_" in line]
    assert offenders == []
