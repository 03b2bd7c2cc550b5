"""External mode proves what it measured: the engine's exit status is recorded (non-zero after the
marker fails the run unless --expect-exit), and GB/s and the bounding wall are shown only with evidence
that the engine read the model in the window; otherwise `no evidence the engine read MODEL`, time only."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.ledger import Ledger
from workbench.measure.engine.evidence import ReadTarget, judge
from workbench.measure.engine.sampler import Descriptor, TreeSampler
from workbench.measure.engine.external import time_external
from workbench.records import ExternalRun, ReadEvidence

MODEL_BYTES = 8 << 20  # bigger than what an interpreter reads to start, so only a real read passes


@pytest.fixture
def env(tmp_path: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from workbench.formats.synth import write_synthetic

    monkeypatch.setenv("WORKBENCH_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    write_synthetic(tmp_path / "m.gguf", format="gguf", layout="dense", size=MODEL_BYTES)
    return tmp_path


def _py(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def _model(env: Path) -> ReadTarget:
    from workbench.formats import open_index

    return ReadTarget.of(str(env / "m.gguf"), open_index(str(env / "m.gguf")).nbytes)


# The reader holds its descriptor a moment after its last read, before its marker: a warm 8 MB read can
# finish between two samples on a loaded machine, and a process that exits right after its marker may be
# gone before the marker's sample (what the evidence cannot see is documented: measure/engine/evidence.py).
READ = ("import os, time; fd = os.open({path!r}, os.O_RDONLY)\nwhile os.read(fd, 1 << 20): pass\n"
        "time.sleep(0.3); print('loaded', flush=True)")
MAP = ("import mmap, os; fd = os.open({path!r}, os.O_RDONLY); m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)\n"
       "sum(m[i] for i in range(0, len(m), 4096)); print('loaded', flush=True); import time; time.sleep(30)")


def test_the_issue_case_a_marker_and_exit_3_without_reading_is_no_gbps(env: Path) -> None:
    # Today (before the fix) this was 9.01 GB/s and 115 % of the ceiling, exit 0.
    with Ledger(env / "ledger.sqlite") as led:
        led.record_ceiling("page_cache_read_1t", 7.8, {"mode": "test"})
        led.record_ceiling("cold_read", 1.0, {"mode": "test"})
    args = ["external", "--file", str(env / "m.gguf"), "--cmd", "sh -c 'echo loaded; exit 3'", "--marker",
            "loaded", "--runs", "2", "--cache", "warm", "--device", "host"]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 3, out.output  # non-zero after the marker: a failed run
    assert "exited with code 3 after the marker /loaded/" in out.stderr and "--expect-exit 3" in out.stderr
    out = CliRunner().invoke(main, [*args, "--expect-exit", "3", "--json"], catch_exceptions=False)
    assert out.exit_code == 4, out.output  # finished, but nothing shows it read the model: time only
    out = CliRunner().invoke(main, [*args, "--expect-exit", "3", "--json", "--time-only"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["verdict"] == "baseline" and data["n"] == 2 and data["median_s"] > 0  # time only
    assert data["gbps"] is None and data["ceiling_fraction"] is None and data["ceiling_name"] is None
    assert "no evidence the engine read m.gguf in 2/2 runs (none 2/2): time only, no GB/s" in data["notes"]
    run = data["runs"][0]
    assert run["bytes"] == 0 and run["engaged"][0].startswith("no evidence the engine read m.gguf (none: at most")
    engine = run["external"]
    assert engine["returncode"] == 3 and engine["ended"] == "exited" and engine["expect_exit"] == 3
    assert engine["evidence"]["basis"] == "" and engine["evidence"]["model_bytes"] > 7 << 20
    # the table, the ledger and the exports: no GB/s, no % of a ceiling, the evidence line instead
    table = CliRunner().invoke(main, [*args, "--expect-exit", "3"], catch_exceptions=False).stdout
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if "sh -c" in line)
    row = lines[at]
    header = next(line for line in lines if line.startswith("attempt"))

    def cell(name: str) -> str:  # the table's columns are aligned under their header
        start = header.index(name)
        return row[start:start + len(name)].strip()

    # the engaged column wraps onto indented lines of its own under a narrow terminal
    facts = " ".join([row, *(x.strip() for x in lines[at + 1:] if x.startswith(" "))])
    assert "no evidence the engine read m.gguf" in facts and cell("GB/s") == "—" and cell("% ceiling") == "—"
    assert not any(line.startswith("ceiling ") for line in table.splitlines())  # no wall held against it
    with Ledger(env / "ledger.sqlite") as led:
        attempts = led.attempts()
        assert attempts["gbps"].isna().all() or set(attempts["verdict"]) == {"failed", "baseline"}
        ok = attempts[attempts["verdict"] == "baseline"]
        assert ok["gbps"].isna().all() and ok["ceiling_fraction"].isna().all()
        from workbench.ledger.export import runs_frame
        from workbench.ledger.table import markdown_table

        frame = runs_frame(led)
        assert frame[frame["error"].isna()]["gbps"].isna().all()
        assert set(frame[frame["error"].isna()]["evidence"]) == {"none"}  # the grade, in runs.csv
        md = markdown_table(led, all_attempts=True)
    assert "no evidence the engine read m.gguf (none: " in md and "% of" not in md  # the grade, in the export


def test_an_engine_that_reads_the_model_shows_gbps_with_its_evidence(env: Path) -> None:
    code = READ.format(path=str(env / "m.gguf"))
    out = CliRunner().invoke(main, ["external", "--file", str(env / "m.gguf"), "--cmd", _py(code), "--marker",
                                    "loaded", "--runs", "2", "--cache", "warm", "--device", "host", "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["gbps"] and data["gbps"] > 0 and "no evidence" not in (data["notes"] or "")
    engine = data["runs"][0]["external"]
    assert engine["returncode"] == 0 and engine["ended"] == "exited"  # it exited on its own after the marker
    assert engine["evidence"]["grade"] == "bytes-read" and engine["evidence"]["source"] == "events"
    assert "read by its read calls on the model's files" in engine["evidence"]["basis"]
    assert data["runs"][0]["engaged"] == [f"engine read m.gguf (bytes-read): {engine['evidence']['basis']}"]
    assert "evidence: bytes-read 2/2" in data["notes"]  # the grade beside the GB/s
    with Ledger(env / "ledger.sqlite") as led:
        from workbench.ledger.export import runs_frame
        from workbench.ledger.table import markdown_table

        assert list(runs_frame(led)["evidence"]) == ["bytes-read", "bytes-read"]
        assert "engine read m.gguf (bytes-read): " in markdown_table(led, all_attempts=True)


def test_an_engine_that_maps_the_model_warm_is_seen_through_its_mappings(env: Path) -> None:
    out = time_external(_py(MAP.format(path=str(env / "m.gguf"))), "loaded", timeout_s=30, nbytes=123,
                        model=_model(env))
    evidence = out.report.external.evidence
    assert out.error is None and evidence.grade == "mapping-touched", evidence
    assert "touched through its mappings" in evidence.basis
    assert evidence.touched_bytes >= 0.9 * evidence.model_bytes and out.bytes == 123
    assert out.report.external.ended == "killed at the marker" and out.report.external.returncode is None


def test_a_cold_read_shows_in_the_page_cache(env: Path) -> None:
    from workbench.errors import CacheStateError
    from workbench.io.pagecache import prepare

    model = _model(env)  # indexing reads the header: before the cache is made cold
    try:
        prepare(str(env / "m.gguf"), "cold")
    except CacheStateError as exc:
        pytest.skip(f"cold unreachable here: {exc}")
    out = time_external(_py(READ.format(path=str(env / "m.gguf"))), "loaded", timeout_s=30, nbytes=1,
                        model=model)
    evidence = out.report.external.evidence
    assert evidence.grade == "bytes-read" and evidence.read_call_bytes >= 0.9 * evidence.model_bytes
    assert evidence.resident_after - evidence.resident_before >= 0.9 * evidence.model_bytes


def test_reads_by_children_count_reaped_or_running(env: Path) -> None:
    path = str(env / "m.gguf")
    # the reader holds its descriptor a moment after its last read (so a sample sees where it got to on a
    # loaded machine, where a warm 8 MB read can finish between two samples), then exits and is reaped
    reader = _py(f"import os, time; fd = os.open({path!r}, os.O_RDONLY)\nwhile os.read(fd, 1 << 20): pass\n"
                 "time.sleep(0.5)")
    # a child that read and exited (reaped by its shell before the marker), and one still running
    reaped = f"sh -c {shlex.quote(reader + '; echo loaded; sleep 30')}"
    running = f"sh -c {shlex.quote(_py(READ.format(path=path) + chr(10) + 'import time; time.sleep(30)') + ' & sleep 30')}"
    for cmd, seen in ((reaped, 1), (running, 2)):
        out = time_external(cmd, "loaded", timeout_s=30, nbytes=1, model=_model(env))
        evidence = out.report.external.evidence
        assert out.error is None and evidence.grade == "bytes-read", (cmd, evidence)
        # the reaped reader is in the event record whether or not a sample ever saw it
        assert evidence.processes >= seen and evidence.opens >= 1


def test_exit_status_after_the_marker(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.measure.engine import external

    model = _model(env)
    # a 3 s grace: counted in the wall, it would add 3 s; what killing the tree takes on a loaded box
    # (the reaper scheduled late) stays far under half of it (the 0.5 s grace left a 0.4 s bound)
    monkeypatch.setattr(external, "EXIT_GRACE_S", 3.0)
    killed = time_external(_py("import time; print('loaded', flush=True); time.sleep(30)"), "loaded",
                           timeout_s=30, model=model)
    assert killed.error is None and killed.report.external.ended == "killed at the marker"
    assert killed.wall_s < 1.5 + killed.load_s  # the grace it ran through is not its wall
    failed = time_external("sh -c 'echo loaded; exit 7'", "loaded", timeout_s=30, model=model)
    assert failed.load_s is None and "exited with code 7 after the marker" in failed.error
    assert failed.report.external.returncode == 7 and failed.report.external.ended == "exited"
    from workbench.measure.engine.command import EngineCommand

    accepted = time_external(EngineCommand("sh -c 'echo loaded; exit 7'", "loaded", expect_exit=7),
                             timeout_s=30, model=model)
    assert accepted.error is None and accepted.bytes == 0  # accepted, and no evidence: time only
    wrong = time_external(EngineCommand("sh -c 'echo loaded; exit 0'", "loaded", expect_exit=7), timeout_s=30)
    assert "exited with code 0 after the marker" in wrong.error and "--expect-exit 7 was expected" in wrong.error
    before = time_external("sh -c 'echo nope; exit 5'", "loaded", timeout_s=30)
    assert before.report.external.returncode == 5 and "before any line matched" in before.error


def test_the_sampled_fallback_credits_descriptors_only_and_says_how_much() -> None:
    # where no event record can be made (another kernel, no privileges) the samples grade the run
    model = ReadTarget("m.gguf", ("/nonexistent",), 100 << 20, (100 << 20,), ((1, 2),))
    # 40 MiB read calls and 95 MiB fetched from storage, none of it through the model; a page-cache
    # gain alone (readahead makes one without reading): no evidence
    sampler = TreeSampler(0, model, resident_before=(0,), samples=3)
    sampler.rchar, sampler.read_bytes = {7: [0, 40 << 20]}, {7: [0, 95 << 20]}
    evidence = judge(sampler, resident_after=(100 << 20,), why="no tracepoints")
    assert not evidence.ok and evidence.rchar == 40 << 20 and evidence.source == "samples: no tracepoints"
    assert evidence.describe() == ("no evidence the engine read m.gguf (opened-only: at most 0 B of its 100.00 MiB "
                                   "(page cache gain 100.00 MiB); it never opened or mapped it): time only")
    # every page of it resident in its mappings: populated or touched, samples cannot tell — mapped-only
    sampler.mapped = [100 << 20]
    assert judge(sampler, None).grade == "mapped-only" and not judge(sampler, None).ok
    # a descriptor on the model that reached 95 MiB, its process's read calls returning as much: evidence
    sampler.descriptors = {(7, 3, 0): Descriptor(0, 0, 95 << 20)}
    sampler.rchar, sampler.held = {7: [0, 95 << 20]}, {0}
    enough = judge(sampler, None)
    assert enough.ok and enough.grade == "bytes-read"
    assert enough.basis == "95.00 MiB read through its descriptors on the model's files (100.00 MiB of tensors; sampled)"
    # its offset moved by a seek, its read calls returned 40 MiB: the offset is bounded by rchar
    sampler.rchar = {7: [0, 40 << 20]}
    bounded = judge(sampler, None)
    assert not bounded.ok and bounded.fd_bytes == 40 << 20 and "it held 1/1 of its files" in bounded.describe()


def test_evidence_round_trips_through_the_run_record() -> None:
    evidence = ReadEvidence("m.gguf", 10, rchar=12, read_bytes=0, mapped_bytes=0, resident_before=0,
                            resident_after=4096, processes=2, samples=5, basis="x")
    run = ExternalRun(cmd="e", marker="m", returncode=None, ended="killed at the marker", expect_exit=3,
                      evidence=evidence)
    assert ExternalRun.from_json(json.loads(json.dumps(run.to_json()))) == run
    old = ExternalRun.from_json({"cmd": "e", "marker": "m", "returncode": None, "output_tail": []})
    assert old.evidence is None and old.ended is None  # rows recorded before stay readable


def test_a_set_is_read_only_when_every_shard_is(sharded_model, tmp_path: Path) -> None:
    index = sharded_model("safetensors", "dense", shards=3, size=12 << 20)
    target = ReadTarget.of(str(Path(index.path).parent))  # the set's directory, as --file takes it
    assert len(target.paths) == 3 and target.nbytes == index.nbytes
    # an engine stays up after its ready line (killed at the marker): one that exits at once can be gone
    # before the runner's last look at its tree, and a gone process's reads are no evidence (time only)
    read_all = ("import os, sys, time\nfor p in sys.argv[1:]:\n    fd = os.open(p, os.O_RDONLY)\n"
                "    while os.read(fd, 1 << 20): pass\nprint('loaded', flush=True)\ntime.sleep(30)")
    every = time_external(f"{_py(read_all)} {' '.join(map(shlex.quote, target.paths))}", "loaded", timeout_s=30,
                          nbytes=1, model=target)
    one = time_external(f"{_py(read_all)} {shlex.quote(target.paths[0])}", "loaded", timeout_s=30, nbytes=1,
                        model=target)
    assert every.report.external.evidence.ok and every.bytes == 1
    assert not one.report.external.evidence.ok and one.bytes == 0  # a third of the set is no load of it
    assert one.report.external.evidence.grade == "opened-only"  # read a third of it
    assert "(opened-only: at most 3.95 MiB of its 11.95 MiB reached it (3.95 MiB read by read calls))" in one.engaged[0]


def test_without_an_event_record_the_run_says_why_and_a_mapping_is_never_credited(
        env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a kernel without the filemap tracepoints (Linux < 6.11), tracefs or perf: the samples grade it
    from workbench.io.fileevents import recorder

    monkeypatch.setattr(recorder, "tracepoints", lambda: ({}, "this kernel has no filemap tracepoint (test)"))
    model = _model(env)
    mapped = time_external(_py(MAP.format(path=str(env / "m.gguf"))), "loaded", timeout_s=30, nbytes=1, model=model)
    evidence = mapped.report.external.evidence
    assert evidence.source == "samples: this kernel has no filemap tracepoint (test)"
    # resident pages of a mapping cannot tell touched from populated: mapped-only, time only
    assert evidence.grade == "mapped-only" and mapped.bytes == 0, evidence
    read = time_external(_py(READ.format(path=str(env / "m.gguf"))), "loaded", timeout_s=30, nbytes=1, model=model)
    assert read.report.external.evidence.grade == "bytes-read" and read.bytes == 1  # its descriptor's offset


def test_reads_before_the_start_marker_are_not_the_windows(env: Path) -> None:
    # the event record keeps only what the kernel timed between the start and the end marker
    from workbench.measure.engine.command import EngineCommand

    path = str(env / "m.gguf")
    # the markers 1 s apart: at 0.2 s they once arrived in one read (the 2-core VM, -n 2 beside 2 busy
    # loops, load 3, 2026-12-05 08:23 UTC), which fails the run before anything is graded
    before = ("import os, time; fd = os.open({path!r}, os.O_RDONLY)\nwhile os.read(fd, 1 << 20): pass\n"
              "time.sleep(0.2); print('start', flush=True); time.sleep(1.0); print('loaded', flush=True); "
              "time.sleep(30)").format(path=path)
    inside = ("import os, time; print('start', flush=True); time.sleep(1.0); fd = os.open({path!r}, os.O_RDONLY)\n"
              "while os.read(fd, 1 << 20): pass\nprint('loaded', flush=True); time.sleep(30)").format(path=path)
    model = _model(env)
    grades = {}
    for name, code in (("before", before), ("inside", inside)):
        out = time_external(EngineCommand(_py(code), "loaded", start_marker="start"), timeout_s=30, nbytes=1,
                            model=model)
        assert out.error is None, out.error
        grades[name] = out.report.external.evidence.grade
    assert grades == {"before": "opened-only", "inside": "bytes-read"}, grades


def test_the_window_ends_when_the_marker_was_written_not_when_it_was_read(env: Path) -> None:
    # an engine that prints its marker and then reads the model: whatever the workbench's delay in
    # reading the marker (here: until the engine has read it all), those reads are not the load
    import subprocess
    import time

    path = str(env / "m.gguf")
    code = (f"import os; print('loaded', flush=True); fd = os.open({path!r}, os.O_RDONLY)\n"
            "while os.read(fd, 1 << 20): pass\nprint('done', flush=True); import time; time.sleep(30)")
    sampler = TreeSampler.at_spawn(_model(env))  # before the spawn: the record follows what it starts
    began = time.monotonic()
    proc, lines = _on_a_terminal(code)
    try:
        sampler.root = proc.pid
        assert next(lines) == "loaded" and next(lines) == "done"
        late = time.monotonic()  # the marker "read" only now, after every read of the model
        evidence = sampler.finish(began, late, prior_s=began)
    finally:
        proc.kill()
        proc.wait()
        sampler.close()
    assert evidence.source == "events" and evidence.grade == "opened-only", evidence.describe()


def test_the_window_starts_when_the_start_marker_was_written_not_when_it_was_read(env: Path) -> None:
    # the start line read late (after the engine's every read): what it read after printing it counts
    import subprocess
    import time

    path = str(env / "m.gguf")
    code = (f"import os, time; print('start', flush=True); fd = os.open({path!r}, os.O_RDONLY)\n"
            "while os.read(fd, 1 << 20): pass\ntime.sleep(1); print('loaded', flush=True); time.sleep(30)")
    sampler = TreeSampler.at_spawn(_model(env))
    began = time.monotonic()
    proc, lines = _on_a_terminal(code)
    try:
        sampler.root = proc.pid
        time.sleep(0.5)  # the engine has read the model by now
        assert next(lines) == "start"
        late = time.monotonic()  # the start line "read" only now
        assert next(lines) == "loaded"
        evidence = sampler.finish(late, time.monotonic(), prior_s=late, start_prior_s=began)
    finally:
        proc.kill()
        proc.wait()
        sampler.close()
    assert evidence.grade == "bytes-read", evidence.describe()


def test_a_marker_line_read_in_two_pieces_dates_the_window_by_its_first(env: Path) -> None:
    # the engine writes its marker line in two writes, reading the model between them: the read that
    # returned the line's first half is not "before" the marker line, so the window ends at its first write
    path = str(env / "m.gguf")
    code = (f"import os, time; os.write(1, b'loa'); time.sleep(0.3); fd = os.open({path!r}, os.O_RDONLY)\n"
            "while os.read(fd, 1 << 20): pass\nos.write(1, b'ded\\n'); time.sleep(30)")
    out = time_external(_py(code), "loaded", timeout_s=30, nbytes=1, model=_model(env))
    assert out.error is None and out.report.external.evidence.grade == "opened-only", out.engaged


def _on_a_terminal(code: str):
    """``code`` run with its output on a pseudo-terminal, as ``time_external`` runs an engine (its writes
    to a terminal date its lines): the process and an iterator over its output lines."""
    import os
    import pty
    import subprocess

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=slave, stderr=slave)
    os.close(slave)

    def lines():
        with open(master, "rb", buffering=0) as fh:
            buf = b""
            while True:
                while b"\n" not in buf:
                    buf += fh.read(4096)
                line, buf = buf.split(b"\n", 1)
                yield line.decode().strip()

    return proc, lines()


def test_writes_to_a_pipe_before_the_load_do_not_end_the_window(env: Path) -> None:
    # a launcher (pyenv's shim, a wrapper script) runs command substitutions — writes to pipes — before
    # it starts the engine: only writes to the terminal date the engine's output lines
    code = READ.format(path=str(env / "m.gguf"))
    cmd = f"sh -c {shlex.quote('v=$(echo a); w=$(echo b 1>&2; echo c); exec ' + _py(code))}"
    out = time_external(cmd, "loaded", timeout_s=30, nbytes=1, model=_model(env))
    assert out.error is None and out.report.external.evidence.grade == "bytes-read", out.engaged
