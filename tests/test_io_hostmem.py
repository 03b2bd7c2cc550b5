"""Free page reporting detection: the VM confounder every attempt's environment records."""
from __future__ import annotations

from workbench.io import hostmem


def _fake_params(tmp_path, **values):
    for name, value in values.items():
        (tmp_path / name).write_text(f"{value}\n")
    return tmp_path


def test_reporting_active_with_counters(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmem, "REPORTING_PARAMS", _fake_params(tmp_path, page_reporting_order=9,
                                                                  reported_kib=3 * 2**20))
    assert hostmem.reported_kib() == 3 * 2**20
    info = hostmem.memory_reporting()
    assert info["active"] and info["order"] == 9 and info["reported_gib"] == 3.0
    assert "hypervisor" in info["detail"]


def test_no_reporting_module(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmem, "REPORTING_PARAMS", tmp_path / "absent")
    assert hostmem.reported_kib() is None
    assert hostmem.memory_reporting()["active"] is False


def test_unreadable_counter_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(hostmem, "REPORTING_PARAMS", _fake_params(tmp_path, reported_kib="n/a"))
    assert hostmem.reported_kib() is None
    assert hostmem.memory_reporting()["reported_gib"] is None


def test_runner_records_memory_reported_around_each_run(tmp_path, monkeypatch):
    from workbench.formats.synth import write_synthetic
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure

    model = tmp_path / "m.gguf"
    write_synthetic(model, format="gguf", layout="dense", size=256 << 10)
    counter = iter(range(0, 10**9, 2048))  # every read: 2 MiB more reported
    monkeypatch.setattr(hostmem, "reported_kib", lambda: next(counter))
    (res,) = measure([RunConfig(str(model), "pread")], runs=2, cache="asis",
                     ledger=Ledger(tmp_path / "l.sqlite"), lock_dir=tmp_path / "locks")
    assert [r.report.host_memory_reported_mib for r in res.runs] == [2.0, 2.0]
