"""The machine's load-path settings in every attempt (env, ledger, reports) and ceilings that carry
their date and settings."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import ParamError
from workbench.io import gpu_settings
from workbench.io.machine import block_device_settings, bracketed, is_unknown, load_path_settings
from workbench.io.pagecache import filesystem_type
from workbench.ledger import Ledger, markdown_table
from workbench.records import format_differences, settings_differences

from ledger_helpers import record_attempt

SETTING_KEYS = ("fs_type", "mount_options", "block_device", "read_ahead_kb", "io_scheduler", "rotational",
                "thp_enabled", "thp_defrag", "swap_total_bytes", "swappiness", "numa_nodes", "numa_memory",
                "cpu_numa_nodes", "cpu_model", "cpu_governor", "cpu_mhz", "kernel_release", "kernel_cmdline", "iommu")


def test_settings_of_a_directory_are_all_there_and_true_to_the_machine(tmp_path):
    settings = load_path_settings(tmp_path)
    assert set(SETTING_KEYS) <= set(settings)
    assert settings["fs_type"] == filesystem_type(tmp_path)
    assert settings["kernel_release"] == os.uname().release
    with open("/proc/cmdline", encoding="utf-8") as fh:
        assert settings["kernel_cmdline"] == fh.read().strip()
    for key in ("read_ahead_kb", "rotational"):  # a number, or unknown with why
        assert isinstance(settings[key], int) or is_unknown(settings[key]) and "(" in settings[key]
    assert settings["thp_enabled"] in ("always", "madvise", "never") or is_unknown(settings["thp_enabled"])
    json.dumps(settings)  # goes into the ledger as JSON


def test_a_missing_path_or_no_block_device_is_unknown_with_why_never_an_error(tmp_path):
    gone = load_path_settings(tmp_path / "nope")
    assert is_unknown(gone["read_ahead_kb"]) and "No such file" in gone["read_ahead_kb"]
    virtual = block_device_settings(0, 42)
    assert all(is_unknown(v) and "no block device" in v for v in virtual.values())
    assert bracketed("none [mq-deadline] kyber bfq") == "mq-deadline"
    assert bracketed("always [madvise] never") == "madvise"


@pytest.fixture()
def fake_gpu(tmp_path, monkeypatch):
    """A /sys/bus/pci with one NVIDIA GPU in a Gen5 x16 slot running at Gen4, IOMMU passthrough."""
    dev = tmp_path / "pci" / "0000:17:00.0"
    dev.mkdir(parents=True)
    files = {"class": "0x030200", "vendor": "0x10de", "current_link_speed": "16.0 GT/s PCIe",
             "current_link_width": "16", "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16",
             "numa_node": "1",
             "resource": "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n"
                         "0x0000220000000000 0x0000221fffffffff 0x000000000014220c\n"}
    for name, text in files.items():
        (dev / name).write_text(text + "\n")
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "type").write_text("identity\n")
    (dev / "iommu_group").symlink_to(tmp_path / "group")
    other = tmp_path / "pci" / "0000:00:1f.2"  # a SATA controller: no GPU
    other.mkdir()
    (other / "class").write_text("0x010601\n")
    monkeypatch.setattr(gpu_settings, "PCI", tmp_path / "pci")
    return dev


def test_a_gpus_link_iommu_bar1_and_numa_node_from_sysfs(fake_gpu, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    settings = gpu_settings.gpu_settings()
    key = "gpu.0000:17:00.0."
    assert settings[key + "vendor"] == "NVIDIA"
    assert settings[key + "pcie_current"] == "Gen4 x16" and settings[key + "pcie_max"] == "Gen5 x16"
    assert settings[key + "iommu"] == "identity"
    assert settings[key + "bar1_bytes"] == 128 << 30
    assert settings[key + "numa_node"] == "1"
    assert not any(k.startswith("gpu.0000:00:1f.2") for k in settings)
    assert not any(k.startswith("smi.") for k in settings)


def test_nvidia_smi_links_are_read_where_it_is_installed(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '00000000:17:00.0, NVIDIA H200, 580.159.04, 5, 5, 16, 16'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    found = gpu_settings.nvidia_smi()
    assert found == {"smi.0000:17:00.0.name": "NVIDIA H200", "smi.0000:17:00.0.driver": "580.159.04",
                     "smi.0000:17:00.0.pcie_current": "Gen5 x16", "smi.0000:17:00.0.pcie_max": "Gen5 x16"}
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert "exit 9" in gpu_settings.nvidia_smi()["smi"]


def test_env_shows_the_settings_and_json_carries_them(tmp_path):
    runner = CliRunner()
    text = runner.invoke(main, ["env", "--dir", str(tmp_path)])
    assert text.exit_code == 0, text.output
    assert "load-path settings" in text.output and "read_ahead_kb" in text.output and "thp_enabled" in text.output
    data = json.loads(runner.invoke(main, ["env", "--dir", str(tmp_path), "--json"]).output)
    assert set(SETTING_KEYS) <= set(data["settings"])


# -- comparing two attempts' settings ------------------------------------------------------------------


def env(**settings) -> dict:
    base = {"read_ahead_kb": 128, "io_scheduler": "none", "thp_enabled": "madvise", "cpu_mhz": 2000,
            "swap_used_bytes": 0, "gpu.0000:17:00.0.pcie_current": "Gen1 x16"}
    return {"kernel": "6.8", "settings": {**base, **settings}}


def test_settings_differences_name_settings_not_states():
    assert settings_differences(env(), env(cpu_mhz=3400, swap_used_bytes=5, **{
        "gpu.0000:17:00.0.pcie_current": "Gen5 x16"})) == []  # they move by themselves
    diffs = settings_differences(env(), {**env(read_ahead_kb=8192), "kernel": "6.9"})
    assert diffs == [("kernel", "6.8", "6.9"), ("read_ahead_kb", 128, 8192)]
    assert settings_differences(env(), {"kernel": "6.8"}) is None  # recorded before settings were
    assert settings_differences(env(), env(numa_nodes="0-1")) == [("numa_nodes", "absent", "0-1")]
    text = format_differences([(f"k{i}", i, i + 1) for i in range(8)], limit=3)
    assert text == "k0 0 → 1, k1 1 → 2, k2 2 → 3 (+5 more)"


def test_memory_amounts_that_a_vm_moves_by_a_little_are_not_a_difference():
    """A VM's balloon moved node0's MemTotal from 10.0 to 10.1 GiB between two attempts of one test run
    (2-core VM, 2026-12-03): a baseline then 'differed'. Within 5 % it is the same machine; a real change
    of memory or of the node count still differs."""
    def env(numa, ram):
        return {"settings": {"numa_memory": numa, "read_ahead_kb": 128}, "ram_bytes": ram}

    assert settings_differences(env("node0 10.0 GiB", 24_000_000_000), env("node0 10.1 GiB", 24_300_000_000)) == []
    assert settings_differences(env("node0 10.0 GiB", 24 << 30), env("node0 16.0 GiB", 24 << 30)) == [
        ("numa_memory", "node0 10.0 GiB", "node0 16.0 GiB")]
    assert [d[0] for d in settings_differences(env("node0 10.0 GiB", 24 << 30),
                                               env("node0 5.0 GiB, node1 5.0 GiB", 48 << 30))] == [
        "numa_memory", "ram_bytes"]


def test_the_pr_table_lists_the_settings_that_differ_from_the_baseline(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        base = record_attempt(led, "pread", [0.5, 0.5, 0.5, 0.5, 0.5], campaign="s", environment=env())
        record_attempt(led, "mmap", [0.4, 0.4, 0.4, 0.4, 0.4], campaign="s", baseline=base,
                       environment=env(read_ahead_kb=8192, io_scheduler="mq-deadline"))
        record_attempt(led, "lanes", [0.4, 0.4, 0.4, 0.4, 0.4], campaign="s", baseline=base, environment=env())
        table = markdown_table(led, "s")
        assert "**Load-path settings that differ from the baseline**" in table
        assert "io_scheduler none → mq-deadline, read_ahead_kb 128 → 8192" in table
        assert table.count(f"vs baseline `{base[0][:8]}`") == 1  # lanes ran under the same settings
        same = record_attempt(led, "willneed", [0.4] * 5, campaign="t", environment=env())
        record_attempt(led, "warmer", [0.4] * 5, campaign="t", baseline=same, environment=env(cpu_mhz=1))
        assert "ran under its baseline's load-path settings (1 compared)" in markdown_table(led, "t")


# -- ceilings: date and settings ---------------------------------------------------------------------


def test_a_ceiling_says_when_it_is_old_or_was_measured_under_other_settings(tmp_path):
    from workbench.measure.ceilings.age import ceiling_caveat

    with Ledger(tmp_path / "l.sqlite") as led:
        led.record_ceiling("memcpy", 10.0, {"settings": env()["settings"]}, host="h")
        led.record_ceiling("cold_read_buffered_1t", 1.0, {}, host="h")
        assert ceiling_caveat(led, "memcpy", env(cpu_mhz=1), host="h") == ""
        later = datetime.now(timezone.utc) + timedelta(days=45)
        old = ceiling_caveat(led, "memcpy", env(), host="h", now=later, max_age_days=30)
        assert "45 days ago (over 30)" in old and "workbench ceilings --refresh" in old
        other = ceiling_caveat(led, "memcpy", env(read_ahead_kb=4096), host="h")
        assert "under other settings: read_ahead_kb 128 → 4096" in other
        assert "without its settings recorded" in ceiling_caveat(led, "cold_read_buffered_1t", env(), host="h")
        assert ceiling_caveat(led, "nope", env(), host="h") == ""


def test_ceilings_record_their_settings_and_refresh_measures_again_the_same_way(tmp_path, monkeypatch):
    from workbench.measure.ceilings.age import refresh_plan

    monkeypatch.setenv("WORKBENCH_HOST", "rig")
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    ledger = tmp_path / "l.sqlite"
    runner = CliRunner()
    refused = runner.invoke(main, ["ceilings", "--refresh", "--ledger", str(ledger)])
    assert refused.exit_code == 2 and "no ceilings recorded for host rig" in refused.output
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first = runner.invoke(main, ["ceilings", "--dir", str(scratch), "--size", "4MiB", "--threads", "1",
                                 "--ledger", str(ledger)])
    assert first.exit_code == 0, first.output
    with Ledger(ledger) as led:
        walls = led.ceilings(host="rig")
        assert all(d["settings"]["fs_type"] == filesystem_type(scratch) for d in walls["detail"])
        assert refresh_plan(led) == {"devices": ("host",), "directory": str(scratch), "size": 4 << 20}
        before = dict(zip(walls["name"], walls["measured_at"]))
    again = runner.invoke(main, ["ceilings", "--refresh", "--threads", "1", "--ledger", str(ledger)])
    assert again.exit_code == 0, again.output
    with Ledger(ledger) as led:
        after = led.ceilings(host="rig")
    assert set(after["name"]) == set(before)
    assert all(at > before[name] for name, at in zip(after["name"], after["measured_at"]))
    assert {d["size"] for d in after["detail"]} == {4 << 20}
    scratch.rmdir()
    with Ledger(ledger) as led, pytest.raises(ParamError, match="is gone: give --dir"):
        refresh_plan(led)


def test_an_attempt_held_against_an_old_or_foreign_ceiling_says_so(tmp_path, monkeypatch):
    from workbench.cli.notebooks.actions import ensure_model

    monkeypatch.setenv("WORKBENCH_HOST", "rig")
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    model = ensure_model(tmp_path / "m.gguf", layout="dense", format="gguf", size=1 << 20)
    ours = load_path_settings(tmp_path)
    theirs = {**ours, "read_ahead_kb": "unknown (elsewhere)" if ours["read_ahead_kb"] != "unknown (elsewhere)" else 1}
    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as led:
        for wall in ("page_cache_read_1t", "cold_read_buffered_1t", "h2d_host_pageable", "h2d_host_pinned"):
            led.record_ceiling(wall, 50.0, {"settings": theirs}, host="rig")
    done = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "warm",
                                     "--ledger", str(ledger)])
    assert done.exit_code == 0, done.output
    assert "under other settings: read_ahead_kb" in done.output and "--refresh" in done.output
    with Ledger(ledger) as led:
        notes = led.attempts()["notes"].iloc[0]
    assert "under other settings: read_ahead_kb" in notes
    monkeypatch.setenv("WORKBENCH_CEILINGS_MAX_AGE_DAYS", "0.000001")
    with Ledger(ledger) as led:
        for wall in ("page_cache_read_1t", "cold_read_buffered_1t", "h2d_host_pageable", "h2d_host_pinned"):
            led.record_ceiling(wall, 50.0, {"settings": ours}, host="rig")
    done = CliRunner().invoke(main, ["run", str(model), "--strategy", "pread", "--runs", "1", "--cache", "warm",
                                     "--ledger", str(ledger)])
    assert done.exit_code == 0, done.output
    assert "days ago (over 1e-06)" in done.output and "other settings" not in done.output
