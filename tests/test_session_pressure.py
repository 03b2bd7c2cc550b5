"""``--memory-limit``: a memory cgroup where the machine allows one (v1 here), a locked balloon else, a
one-line refusal when neither works; what the limit cost (reclaim and re-reads, or the OOM killer)."""
from __future__ import annotations

import pytest

import workbench.measure.pressure as pressure
from workbench.errors import ParamError
from workbench.expert.procstat import CgroupMemory, CgroupProbe, read_io, read_status
from workbench.expert.session import SessionConfig
from workbench.measure.pressure import MemoryPressure
from workbench.measure.session import measure_session

MiB = 1 << 20


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


@pytest.fixture(scope="module")
def cgroups():
    try:
        with MemoryPressure(64, "cgroup") as p:
            return p.limit.method
    except ParamError as exc:
        pytest.skip(f"no memory cgroup can be made here: {exc}")


def _vmlck() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmLck:"))


def test_a_cgroup_child_of_our_own_holds_the_limit_and_goes_away(cgroups):
    with MemoryPressure(32) as p:
        lim = p.limit
        assert lim.method == cgroups and lim.limit_bytes == 32 * MiB and "32 MiB" in lim.detail
        probe = CgroupProbe(lim.path, lim.version)
        assert probe.read().usage_bytes == 0 and probe.read().oom_kills == 0  # nobody in it yet
        assert lim.worker_json() == {"path": lim.path, "version": lim.version}
    import os

    assert not os.path.exists(lim.path)


def test_a_session_under_a_limit_records_its_cgroup_every_turn(cgroups, synth_model, tmp_path):
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    config = SessionConfig(turns=3, tokens=2, cache_mib=1, experts_per_token=4, memory_limit_mib=256, reader="pread")
    result = measure_session(index.path, config, ledger=tmp_path / "l.sqlite", cache="cold")
    assert result.error is None and result.memory.startswith("cgroup")
    assert "no pressure seen" in result.memory or "reclaim" in result.memory
    turns = result.report.turns
    assert all(t.cg_usage_bytes > 0 and t.cg_limit_hits >= 0 and t.cg_pgmajfault >= 0 for t in turns)
    assert result.report.summary.facts.memory_limit.startswith("cgroup")
    assert "memory limit: cgroup" in result.notes


def test_a_limit_below_what_the_cache_holds_ends_in_the_oom_killer(cgroups, synth_model, tmp_path):
    index = synth_model("gguf", "moe", alignment=64, size=64 << 20, experts=64)
    config = SessionConfig(turns=4, tokens=8, cache_mib=48, experts_per_token=8, memory_limit_mib=24)
    result = measure_session(index.path, config, ledger=tmp_path / "l.sqlite")
    assert result.verdict == "failed" and "OOM-killed" in result.memory and "exit -9" in result.error


@pytest.mark.machine_wide  # locks all but 16 MiB of the machine's available memory: no other test may run meanwhile
def test_a_balloon_locks_what_is_available_beyond_the_limit(monkeypatch):
    before = _vmlck()
    available = pressure._mem_available()
    with MemoryPressure((available - 16 * MiB) / MiB, "balloon") as p:
        assert p.limit.method == "balloon" and "locked" in p.limit.detail and p.limit.worker_json() == {}
        assert _vmlck() - before >= 8 * MiB  # MemAvailable moves a little between the two reads
        assert p.outcome(-9, 0, 0, 0).startswith("OOM-killed (SIGKILL under a balloon)")
    assert _vmlck() == before


def test_neither_a_cgroup_nor_a_balloon_is_one_line(monkeypatch):
    monkeypatch.setattr(pressure, "_V1_ROOT", "/nonexistent")
    monkeypatch.setattr(pressure, "_V2_ROOTS", ("/nonexistent",))
    monkeypatch.setattr(pressure, "_mem_available", lambda: 10 * MiB)
    with pytest.raises(ParamError) as err:
        MemoryPressure(64).__enter__()
    message = str(err.value)
    assert "\n" not in message and "cannot enforce it here" in message
    assert "cgroup_v1" not in message and "v1:" in message and "balloon:" in message


def test_outcome_says_which_cost_the_limit_had(cgroups):
    with MemoryPressure(64) as p:
        assert p.outcome(0, 0, 0, 0).startswith("no pressure seen")
        assert p.outcome(0, 12, 3, 40).startswith("reclaim and re-reads: the limit was hit 40 times, 12 refaults, 3 major")


def test_counter_readers_work_here():
    io = read_io()
    assert io.rchar > 0
    status = read_status()
    assert status.rss_bytes > 0 and status.anon_bytes > 0 and status.swap_bytes >= 0
    delta = CgroupMemory(usage_bytes=10, pgmajfault=5, refaults=-1).minus(CgroupMemory(usage_bytes=4, pgmajfault=2))
    assert (delta.usage_bytes, delta.pgmajfault, delta.refaults) == (10, 3, -1)
