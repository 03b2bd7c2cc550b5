"""CI-sized parser fuzzing: a few hundred derandomized hypothesis cases over both formats.

The same cases as benchmarks/fuzz/fuzz_formats.py (whose recorded 10,000+-case run is in
docs/hardening/fuzz.md, and fuzz-sets.md for sharded models): mutated headers of the synthetic models,
truncations, random bytes, and sets with mutated index files, split keys and layouts. Each must
give a valid index or one FormatError line, within 1 s, allocating no more than its header's size
allows (see benchmarks/fuzz/fuzz_harness.py). Derandomized, so a failure here reproduces on every run.
"""
from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fuzz_harness as fh  # noqa: E402

CASES = 120  # the suite's share; the recorded campaigns (docs/hardening/fuzz*.md) ran thousands
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    bases = fh.make_synth_bases(root / "bases")
    for base in bases:  # the first parse imports gguf-py: keep that out of the measured peaks
        fh.run_case(fh.truncate_case(base, base.size), root / "case", 1.0)
    tracemalloc.start()
    yield bases, root / "case"
    tracemalloc.stop()


def check(result: fh.Result) -> None:
    c = result.case
    assert result.ok, (f"{result.problems}: {c.kind} of {c.base} ({c.note}), {len(c.head)}-byte header, "
                       f"size {c.size} → {result.outcome}: {result.detail} [{result.seconds:.2f} s, "
                       f"{result.peak_bytes} B]")


def test_fuzz_cases_meet_the_contract(fuzz_env):
    bases, scratch = fuzz_env

    @settings(max_examples=CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        check(fh.run_case(data.draw(fh.cases(bases)), scratch, limit_s=1.0))

    one()


def test_every_truncation_of_the_moe_headers(fuzz_env):
    bases, scratch = fuzz_env
    for base in bases:
        if base.name.endswith("moe"):
            for where in range(0, len(base.head) + 1, 11):  # every 11th position: ~1000 cases
                check(fh.run_case(fh.truncate_case(base, where), scratch, limit_s=1.0))


def test_the_harness_catches_what_it_must(fuzz_env, monkeypatch):
    """The checks can fail: a parser that crashes, hangs or indexes past EOF is reported."""
    bases, scratch = fuzz_env
    base = bases[0]
    whole = fh.truncate_case(base, base.size)
    assert fh.run_case(whole, scratch, 1.0).outcome == "index"

    def crash(path):
        raise KeyError("x")

    monkeypatch.setattr(fh, "open_index", crash)
    assert fh.run_case(whole, scratch, 1.0).problems == ("crash",)
    from workbench.formats.index import TensorIndex, TensorInfo

    bad = TensorIndex(str(scratch), "gguf", 10, 0, 32, (TensorInfo("t", 0, 20, "F32", (5,)),))
    monkeypatch.setattr(fh, "open_index", lambda path: bad)
    assert fh.run_case(fh.Case("x", "-", b"", 10), scratch, 1.0).problems[0].startswith("bad index")
    monkeypatch.setattr(fh, "open_index", lambda path: bytearray(64 << 20) and bad)
    assert "alloc" in fh.run_case(fh.Case("x", "-", b"", 10), scratch, 1.0).problems
    import time

    monkeypatch.setattr(fh, "open_index", lambda path: time.sleep(0.1) or bad)
    assert "slow" in fh.run_case(fh.Case("x", "-", b"", 10), scratch, 0.05).problems


# --- sharded models: index files, split keys, layouts (benchmarks/fuzz/fuzz_set_cases.py) ------------

SET_CASES = 40


@pytest.fixture(scope="module")
def set_env(tmp_path_factory, fuzz_env):
    import fuzz_sets as fs

    root = tmp_path_factory.mktemp("fuzz-sets")
    tracemalloc.stop()  # writing the bases is not what is measured (and is 3x slower traced)
    bases = fs.make_set_bases(root / "bases", hub=False)
    tracemalloc.start()
    scratch = root / "work" / "model"
    for base in bases:  # the control: every base set indexes, whole
        assert fs.run_set_case(fs.whole_case(base), scratch, 1.0).outcome == "index"
    return bases, scratch


def test_set_fuzz_cases_meet_the_contract(set_env):
    import fuzz_sets as fs
    from fuzz_set_cases import set_cases

    bases, scratch = set_env

    @settings(max_examples=SET_CASES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        check(fs.run_set_case(data.draw(set_cases(bases, scratch)), scratch, limit_s=1.0, hard_limit_s=10.0))

    one()


def test_the_set_harness_catches_a_read_outside_the_model_and_a_blocking_open(set_env, monkeypatch):
    import fuzz_sets as fs
    from fuzz_set_cases import BAIT, OUTSIDE, SetCase

    bases, scratch = set_env
    base = bases[0]
    bait = scratch.parent / OUTSIDE / BAIT
    real_open_index = fs.open_index

    def peeking(path):  # an index that reads the bait "to check it", then indexes as before
        with open(bait, "rb"):
            pass
        return real_open_index(path)

    monkeypatch.setattr(fs, "open_index", peeking)
    assert "read outside the model" in fs.run_set_case(fs.whole_case(base), scratch, 1.0).problems
    monkeypatch.setattr(fs, "open_index", lambda path: open(path / "model-00002-of-00003.safetensors", "rb"))
    fifo = SetCase("layout", base.name, tuple(m for m in base.members if m.name != "model-00002-of-00003.safetensors"),
                   fifos=("model-00002-of-00003.safetensors",))
    assert fs.run_set_case(fifo, scratch, 1.0, hard_limit_s=0.5).problems == ("timeout",)
    monkeypatch.setattr(fs, "open_index", real_open_index)
    assert fs.run_set_case(fifo, scratch, 1.0, hard_limit_s=5.0).outcome == "FormatError: path"
