"""Issue 19, class 7: external mode under hostile engines — a line of megabytes without a newline costs
time linear in its bytes and a bounded buffer; an interpreter behind a shell shim is resolved and hashed
with its script; a FIFO or a path that blocks is refused or timed out, never hung on."""
from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from workbench.errors import ParamError
from workbench.measure.engine.command import EngineCommand, build_files, check_command, identify
from workbench.measure.engine.external import MAX_LINE, LineSplitter, time_external

LONG_LINE_ENGINE = """
import os, sys, time
n, chunk = int(sys.argv[1]), b"x" * 65536
while n > 0:
    n -= os.write(1, chunk[:n])
os.write(1, b"\\nengine ready\\n")
time.sleep(60)
"""


def test_the_line_splitter_is_linear_and_bounded():
    lines = LineSplitter()
    chunk = b"y" * 4096
    t0 = time.perf_counter()
    for _ in range(5000):  # 20 MB, one line, in the pseudo-terminal's 4 KiB pieces
        assert lines.feed(chunk) == []
    elapsed = time.perf_counter() - t0
    assert len(lines.line) == MAX_LINE and lines.cut == 5000 * 4096 - MAX_LINE
    done = lines.feed(b"tail\rengine ready\nrest")
    assert [len(done[0]), done[1]] == [MAX_LINE, b"engine ready"] and lines.longest == 5000 * 4096 + 4
    assert lines.feed(b"") == [b"rest"]
    assert elapsed < 2.0, f"{elapsed:.2f} s for 20 MB: not linear"


def test_an_engine_printing_a_long_line_without_newline_is_timed_not_timed_out(tmp_path):
    engine = tmp_path / "engine.py"
    engine.write_text(LONG_LINE_ENGINE)
    cmd = f"{shlex.quote(sys.executable)} {engine} {8 << 20}"
    out = time_external(cmd, "engine ready", timeout_s=45)
    assert out.error is None and out.load_s is not None, out.error
    assert out.report.external.marker_line == "engine ready"
    assert any(f"{8 << 20:,} bytes" in note for note in out.report.external.notes)
    assert all(len(line) <= 300 for line in out.report.external.output_tail)


def fake_pyenv(tmp_path: Path) -> Path:
    """A shims directory like pyenv's: ``python3`` is a bash script that execs the real interpreter."""
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3"
    shim.write_text(f'#!/usr/bin/env bash\nset -e\nexec "{os.path.realpath(sys.executable)}" "$@"\n')
    shim.chmod(0o755)
    return shims


def test_an_interpreter_behind_a_shim_is_resolved_and_the_script_hashed(tmp_path, monkeypatch):
    shims = fake_pyenv(tmp_path)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    script = tmp_path / "engine.py"
    script.write_text("print('engine ready')\n")
    files = build_files(EngineCommand(f"python3 {script}", "ready"))
    real = os.path.realpath(sys.executable)
    assert files == [("shim", str(shims / "python3")), ("interpreter", real), ("script", str(script))]
    before = identify(files)[1]
    script.write_text("print('engine ready, faster')\n")
    assert identify(files)[1] != before  # a new script is a new build, through the shim too
    with_shebang = tmp_path / "engine"
    with_shebang.write_text("#!/usr/bin/env python3\nprint('engine ready')\n")
    with_shebang.chmod(0o755)
    assert build_files(EngineCommand(str(with_shebang), "ready")) == [
        ("shim", str(shims / "python3")), ("interpreter", real), ("script", str(with_shebang))]


def test_the_cli_says_what_was_hashed(tmp_path, monkeypatch, st_model_path):
    from workbench.cli import main

    shims = fake_pyenv(tmp_path)
    script = tmp_path / "engine.py"
    script.write_text("print('engine ready')\n")
    env = {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "WORKBENCH_LOCK_DIR": str(tmp_path / "locks")}
    out = CliRunner().invoke(main, ["external", "--cmd", f"python3 {script}", "--marker", "engine ready",
                                    "--file", str(st_model_path), "--runs", "1", "--cache", "asis",
                                    "--ledger", str(tmp_path / "l.sqlite"), "--device", "host", "--time-only"],
                             env=env)  # it reads no model: time only, accepted
    assert out.exit_code == 0, out.output
    said = next(line for line in out.output.splitlines() if line.startswith("build of "))
    assert f"interpreter {os.path.realpath(sys.executable)} + script {script}" in said and "through the shim" in said


@pytest.fixture
def st_model_path(tmp_path) -> Path:
    from workbench.formats.synth import write_synthetic

    path = tmp_path / "m.safetensors"
    write_synthetic(path, format="safetensors", layout="dense", size=256 << 10)
    return path


def returns_within(seconds: float, call) -> object:
    """``call()``'s result or exception, failing the test if it has not returned after ``seconds``."""
    box: dict = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - checked by the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return box.get("error", box.get("value"))


def test_a_fifo_named_as_the_engine_is_refused_at_once(tmp_path):
    fifo = tmp_path / "engine"
    os.mkfifo(fifo)
    fifo.chmod(0o755)
    error = returns_within(10, lambda: check_command(EngineCommand(str(fifo), "ready"), 5))
    assert isinstance(error, ParamError) and "not a regular file" in str(error), error
    error = returns_within(10, lambda: check_command(EngineCommand("true", "ready", binary=str(fifo)), 5))
    assert isinstance(error, ParamError) and "not a regular file" in str(error), error


def test_a_fifo_named_as_the_script_is_covered_by_the_timeout(tmp_path):
    fifo = tmp_path / "engine.py"
    os.mkfifo(fifo)
    files = build_files(EngineCommand(f"{sys.executable} {fifo}", "ready"))
    assert files == [("executable", os.path.realpath(sys.executable))]  # not opened, so not hashed
    t0 = time.perf_counter()
    out = returns_within(30, lambda: time_external(f"{shlex.quote(sys.executable)} {fifo}", "ready", timeout_s=2))
    assert out.load_s is None and "timed out" in out.error and time.perf_counter() - t0 < 15


def test_identifying_a_build_that_blocks_is_cut_by_the_timeout(tmp_path, monkeypatch):
    shims = tmp_path / "shims"
    shims.mkdir()
    hung = shims / "python3"  # a shim that never answers when asked where its interpreter is
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    t0 = time.perf_counter()
    error = returns_within(20, lambda: check_command(EngineCommand("python3 engine.py", "ready"), 2))
    assert isinstance(error, ParamError) and "timed out after 2 s identifying" in str(error), error
    assert time.perf_counter() - t0 < 10


# -- second adversarial pass (issue 19 "Done when") --------------------------------------------------------

def test_a_shebang_chain_through_a_wrapper_script_is_refused_not_hashed_as_the_interpreter(tmp_path):
    """``#!/x/run-python`` where run-python is itself a ``#!/bin/sh`` script that execs the interpreter:
    the interpreter that runs is in no #! line, so hashing the wrapper and the script would keep the
    hash whatever interpreter it became."""
    wrapper = tmp_path / "run-python"
    wrapper.write_text(f'#!/bin/sh\nexec "{os.path.realpath(sys.executable)}" "$@"\n')
    wrapper.chmod(0o755)
    engine = tmp_path / "engine.py"
    engine.write_text(f"#!{wrapper}\nprint('engine ready')\n")
    engine.chmod(0o755)
    with pytest.raises(ParamError, match="names a script, not an interpreter") as info:
        build_files(EngineCommand(str(engine), "engine ready"))
    assert "--binary" in str(info.value) and "\n" not in str(info.value)
    assert build_files(EngineCommand(str(engine), "engine ready", binary=sys.executable)) == \
        [("given", os.path.realpath(sys.executable))]
