"""``workbench env`` and the environment record."""
from __future__ import annotations

import socket
import json
import os

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.io import envinfo
from workbench.settings.defaults import host_id
from workbench.measure.run.environment import collect_environment
from workbench.upload import DEVICES

KEYS = {"python", "implementation", "kernel", "hostname", "cpu_model", "cores", "cores_usable",
        "ram_bytes", "dir", "fs_type", "o_direct", "o_direct_reason", "logical_block_size",
        "page_cache_eviction", "page_cache_eviction_reason", "backends", "workbench_version"}


def test_env_json_has_the_keys(tmp_path):
    result = CliRunner().invoke(main, ["env", "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    env = json.loads(result.output)
    assert KEYS <= set(env)
    assert env["dir"] == os.path.realpath(tmp_path)
    assert set(env["backends"]) == set(DEVICES.names())
    assert env["backends"]["host"] == {"ok": True, "reason": ""}
    for name, avail in env["backends"].items():
        assert avail["ok"] or avail["reason"], name  # every unavailable backend says why
    assert env["cores"] >= env["cores_usable"] >= 1
    assert env["host"] == host_id() and env["hostname"] == socket.gethostname()
    assert not list(tmp_path.iterdir())  # probe files cleaned up


def test_env_human_table(tmp_path):
    result = CliRunner().invoke(main, ["env", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("file system") for line in lines)
    assert any(line.startswith("backend host ") for line in lines)
    reporting = next(line for line in lines if line.startswith("memory_reporting"))  # where notes send readers
    assert ("free page reporting" in reporting) and reporting.split("  ", 1)[1].strip()[:3] in ("yes", "no ")
    # aligned: every value starts in the same column (the settings under their heading line too)
    rows = [line for line in lines if line.strip() and not line.startswith("load-path settings")]
    cols = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in rows}
    assert len(cols) == 1


def test_env_missing_dir_is_one_line_exit_2(tmp_path):
    result = CliRunner().invoke(main, ["env", "--dir", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "nope" in result.output and "Traceback" not in result.output


def test_disk_dir_supports_eviction(tmp_path):
    env = collect_environment(tmp_path)
    if env["fs_type"] in ("tmpfs", "ramfs"):
        pytest.skip("tmp_path is in memory")
    assert env["page_cache_eviction"] is True and env["page_cache_eviction_reason"] == ""


def test_tmpfs_eviction_fails_with_reason():
    if not os.path.isdir("/dev/shm") or envinfo.pagecache.filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("/dev/shm is not tmpfs")
    avail = envinfo.eviction_support("/dev/shm")
    assert not avail and "tmpfs" in avail.reason


def test_device_info_included(tmp_path):
    env = collect_environment(tmp_path, device="host-uma")
    assert env["device"]["backend"] == "host-uma" and env["device"]["uma"] is True


def test_git_facts_only_in_a_checkout(monkeypatch):
    facts = envinfo._git_facts()
    if facts:
        assert len(facts["git_commit"]) == 40 and isinstance(facts["git_dirty"], bool)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert envinfo._git_facts() == {}


def test_host_id_tells_machines_with_one_hostname_apart(monkeypatch):
    monkeypatch.delenv("WORKBENCH_HOST", raising=False)
    plain = host_id()
    assert plain.startswith(socket.gethostname())
    monkeypatch.setenv("WORKBENCH_HOST", "apu-rig")
    assert host_id() == "apu-rig"
