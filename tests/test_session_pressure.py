"""``--memory-limit``: a memory cgroup where the machine allows one (v1 here), a locked balloon else, a
one-line refusal when neither works; what the limit cost (reclaim and re-reads, or the OOM killer)."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

import workbench.measure.session.pressure as pressure
from workbench.measure.session import cgroups as cgroup_module
from workbench.measure.session.balloon import measure_working_set
from workbench.errors import ParamError
from workbench.expert.procstat import CgroupMemory, CgroupProbe, read_io, read_status
from workbench.expert.session import SessionConfig
from workbench.measure.session.pressure import MemoryPressure
from workbench.measure.session.runner import measure_session

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
    assert "memory limit: cgroup" in result.notes and "made under " in result.report.summary.facts.memory_limit
    from workbench.ledger import Ledger

    with Ledger(tmp_path / "l.sqlite", readonly=True) as led:  # where it was made, in the attempt's record
        env = led.attempts().set_index("id").loc[result.attempt_id, "environment"]
    made = (json.loads(env) if isinstance(env, str) else env)["memory_limit"]["cgroup"]
    assert made["made_at"] == made["own"] == cgroup_module.own_cgroup(made["version"]) and made["passed"] == []


def test_a_limit_below_what_the_cache_holds_ends_in_the_oom_killer(cgroups, synth_model, tmp_path):
    index = synth_model("gguf", "moe", alignment=64, size=64 << 20, experts=64)
    config = SessionConfig(turns=4, tokens=8, cache_mib=48, experts_per_token=8, memory_limit_mib=24)
    result = measure_session(index.path, config, ledger=tmp_path / "l.sqlite")
    assert result.verdict == "failed" and "OOM-killed" in result.memory and "exit -9" in result.error


@pytest.mark.machine_wide  # locks all but 16 MiB of the machine's available memory: no other test may run meanwhile
def test_a_balloon_locks_what_is_available_beyond_the_limit(monkeypatch):
    before = _vmlck()
    available = pressure.meminfo("MemAvailable") - measure_working_set().bytes
    with MemoryPressure((available - 16 * MiB) / MiB, "balloon") as p:
        assert p.limit.method == "balloon" and "locked" in p.limit.detail and p.limit.worker_json() == {}
        assert _vmlck() - before >= 8 * MiB  # MemAvailable moves a little between the two reads
        # a SIGKILL while the kernel's OOM-kill count stood still was not the OOM killer's (a timeout, a user)
        assert p.outcome(-9, 0, 0, 0).startswith("killed by SIGKILL, not the OOM killer")
    assert _vmlck() == before


def test_neither_a_cgroup_nor_a_balloon_is_one_line(monkeypatch):
    monkeypatch.setattr(cgroup_module, "V1_ROOT", "/nonexistent")
    monkeypatch.setattr(cgroup_module, "V2_ROOTS", ("/nonexistent",))
    monkeypatch.setattr(pressure, "meminfo", lambda key: 10 * MiB)
    with pytest.raises(ParamError) as err:
        MemoryPressure(64).__enter__()
    message = str(err.value)
    assert "\n" not in message and "cannot enforce it here" in message
    assert "cgroup_v1" not in message and "v1:" in message and "balloon:" in message


def test_outcome_says_which_cost_the_limit_had(cgroups):
    with MemoryPressure(64) as p:
        assert p.outcome(0, 0, 0, 0).startswith("no pressure seen")
        assert p.outcome(0, 12, 3, 40).startswith("reclaim and re-reads: the limit was hit 40 times, 12 refaults, 3 major")
        # refaults in a cgroup that never hit its limit came from the machine's reclaim, not the limit's
        assert p.outcome(0, 118, 0, 0).startswith("no pressure seen (the limit was never hit; 118 refaults")


def test_counter_readers_work_here():
    io = read_io()
    assert io.rchar > 0
    status = read_status()
    assert status.rss_bytes > 0 and status.anon_bytes > 0 and status.swap_bytes >= 0
    delta = CgroupMemory(usage_bytes=10, pgmajfault=5, refaults=-1).minus(CgroupMemory(usage_bytes=4, pgmajfault=2))
    assert (delta.usage_bytes, delta.pgmajfault, delta.refaults) == (10, 3, -1)


def test_a_balloon_leaves_the_machine_its_measured_working_set(monkeypatch):
    """Issue 23 §4: a balloon left the session's limit alone for everything, so the kernel reclaimed the
    process's own libraries; it now leaves the limit plus Mapped plus the worker's mapped file pages."""
    worker = 48 * MiB
    working = measure_working_set(worker)
    assert working.mapped_bytes > 0 and working.worker_measured and working.bytes == working.mapped_bytes + worker
    available = pressure.meminfo("MemAvailable")
    limit = available - working.bytes - 64 * MiB  # a balloon of about 64 MiB
    before = _vmlck()
    with MemoryPressure(limit / MiB, "balloon", worker_file_bytes=worker) as p:
        locked = _vmlck() - before
        assert p.limit.working_set_bytes >= working.mapped_bytes + worker - 16 * MiB
        assert "Mapped" in p.limit.detail and "as measured 48 MiB" in p.limit.detail and "before the session" in p.limit.detail
        assert 16 * MiB <= locked <= 112 * MiB, locked / MiB  # the limit alone would have locked the working set too


def test_a_balloon_is_not_copied_into_a_forked_worker():
    """A worker forked under a held balloon (every cell of an A/B) must not copy its page tables."""
    import os

    with MemoryPressure((pressure.meminfo("MemAvailable") - measure_working_set().bytes - 32 * MiB) / MiB,
                        "balloon") as p:
        start = p._balloon.addr
        pid = os.fork()
        if pid == 0:
            with open("/proc/self/maps", encoding="ascii") as fh:
                mapped = any(int(line.split("-")[0], 16) == start for line in fh)
            os._exit(3 if mapped else 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the balloon was mapped in the forked child"


def test_a_held_balloon_serves_every_cell_and_is_inflated_once(synth_model, tmp_path, monkeypatch):
    from workbench.measure.session import balloon

    index = synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=64)
    inflated = []
    real = balloon.Balloon.inflate
    monkeypatch.setattr(balloon.Balloon, "inflate", lambda self: inflated.append(self.size) or real(self))
    config = SessionConfig(turns=2, tokens=1, cache_mib=1, experts_per_token=4, reader="pread", memory_limit_mib=4096)
    limit = (pressure.meminfo("MemAvailable") - measure_working_set().bytes - 32 * MiB) / MiB
    with MemoryPressure(limit, "balloon") as held:
        results = [measure_session(index.path, config, ledger=tmp_path / "l.sqlite", cache="cold", pressure=held)
                   for _ in range(2)]
    assert len(inflated) == 1
    assert all(r.error is None and r.memory.startswith("balloon:") for r in results)
    assert results[0].memory.split(" — ")[0] == results[1].memory.split(" — ")[0]


def test_turns_under_a_limit_say_what_the_pressure_hit(cgroups, synth_model, tmp_path):
    """The model's pages lost and read again, against everything else; none without a limit."""
    index = synth_model("gguf", "moe", alignment=64, size=64 << 20, experts=64)
    config = SessionConfig(turns=4, tokens=4, cache_mib=1, experts_per_token=8, reader="pread", memory_limit_mib=60)
    result = measure_session(index.path, config, ledger=tmp_path / "l.sqlite", cache="cold")
    turns = result.report.turns
    assert all(t.file_rss_bytes > 0 and t.model_fetched_bytes >= 0 and t.vm_refault_file >= 0 for t in turns)
    assert sum(t.model_lost_bytes for t in turns) > 0 and sum(t.model_reread_bytes for t in turns) > 0
    assert "the model's pages read again" in result.memory and "none on the model" in result.memory
    free = measure_session(index.path, dataclasses.replace(config, memory_limit_mib=None, turns=2),
                           ledger=tmp_path / "l.sqlite", cache="cold")
    assert all(t.model_lost_bytes == -1 and t.file_rss_bytes > 0 for t in free.report.turns)
    from workbench.ledger import Ledger

    with Ledger(tmp_path / "l.sqlite", readonly=True) as led:
        extra = led.turns(result.attempt_id)["extra"].iloc[-1]
    assert extra["model_reread_bytes"] == turns[-1].model_reread_bytes  # in the ledger's turn rows


def test_turn_pressure_counts_the_models_pages_lost_fetched_and_read_again(tmp_path):
    from workbench.expert.pressure_turn import PAGE, TurnPressure
    from workbench.io.pagecache import evict_file_pages, warm_file

    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(64 * PAGE))
    os.fsync(os.open(path, os.O_RDONLY))
    evict_file_pages(path)
    probe = TurnPressure([str(path)])
    probe.before()
    warm_file(path, 0, 32 * PAGE)
    first = probe.after(read_bytes=40 * PAGE)
    assert first["model_fetched_bytes"] >= 32 * PAGE and first["model_reread_bytes"] == 0
    assert first["other_fetched_bytes"] == max(0, 40 * PAGE - first["model_fetched_bytes"])
    probe.before()
    evict_file_pages(path, 0, 16 * PAGE)  # reclaim takes 16 pages during the turn …
    second = probe.after(read_bytes=0)
    assert second["model_lost_bytes"] == 16 * PAGE and second["model_fetched_bytes"] == 0
    probe.before()
    warm_file(path, 0, 16 * PAGE)  # … and the next turn reads them again
    third = probe.after(read_bytes=16 * PAGE)
    assert third["model_reread_bytes"] == 16 * PAGE and third["vm_majflt"] >= 0 and third["swap_used_bytes"] >= 0
