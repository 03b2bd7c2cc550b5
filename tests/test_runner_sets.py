"""The runner on a model that is a set of files: cache state set and checked on every file, resident
before per file in the ledger, the set's identity, no pairing across sets, a broken set recorded as failed."""
from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from workbench.formats.synth import write_synthetic
from workbench.io.envinfo import eviction_support
from workbench.io.identity import model_identity
from workbench.settings import defaults
from workbench.errors import BaselineMismatch
from workbench.ledger import Ledger
from workbench.measure import RunConfig, measure
from workbench.measure.run.runner import measure_with
from workbench.measure.run.spawn import Outcome


@pytest.fixture
def ledger(tmp_path: Path, isolated_cache: Path) -> Ledger:
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    with Ledger(tmp_path / "ledger.sqlite") as led:
        yield led


@pytest.fixture
def locks(tmp_path: Path) -> str:
    return str(tmp_path / "locks")


def names(index) -> set[str]:
    return {os.path.basename(f.path) for f in index.files} | ({os.path.basename(index.index_file)}
                                                              if index.index_file else set())


def write_set(path: Path, seed: int, fmt: str = "safetensors"):
    return write_synthetic(path, format=fmt, layout="dense", size=1 << 20, seed=seed, shards=3)


class FakeRuns:
    """A run function standing in for the worker (the runner's side is what is tested): load times
    that vary, ``then`` called before the n-th run."""

    def __init__(self, then: dict[int, object] | None = None):
        self.n, self.then = 0, then or {}
        self.times = itertools.cycle([0.010, 0.011, 0.0105, 0.0098, 0.0102, 0.0107])

    def __call__(self, config: RunConfig) -> Outcome:
        if self.n in self.then:
            self.then[self.n]()
        self.n += 1
        return Outcome(pid=os.getpid(), load_s=next(self.times), wall_s=0.02, bytes=1 << 20, verified=True)


@pytest.mark.parametrize("fmt, cache", [("safetensors", "cold"), ("gguf", "warm")])
def test_cold_and_warm_are_reached_on_every_file_and_recorded_per_file(sharded_model, ledger, locks, fmt,
                                                                       cache) -> None:
    index = sharded_model(fmt, "dense", shards=3)
    model = os.path.dirname(index.files[0].path)  # the directory: resolved to the set
    configs = [RunConfig(model, "pread"), RunConfig(model, "mmap")]
    results = measure(configs, runs=2, cache=cache, ledger=ledger, campaign="sets", lock_dir=locks)
    want = names(index)
    for res in results:
        assert res.cache == cache and res.verdict in ("baseline", "faster", "slower", "inconclusive")
        for run in res.runs:
            assert run.ok and run.verified and run.cache_reached, run.error
            assert set(run.resident_files) == want
            ok = (lambda f: f <= 0.02) if cache == "cold" else (lambda f: f >= 0.98)
            assert all(ok(f) for f in run.resident_files.values()) and ok(run.resident_before)
            assert set(run.report.resident_after_files) == want  # the worker looked at every file too
    stored = ledger.runs(campaign="sets")
    assert len(stored) == 4 and all(set(r) == want for r in stored["resident_files"])
    attempt = ledger.attempt(results[0].attempt_id)
    ident = model_identity(index)
    assert attempt["file_hash"] == ident.hash and ident.hash.startswith("set:xxh3_128:")
    assert attempt["file_path"] == index.path and attempt["file_size"] == index.size
    assert {m["name"] for m in attempt["environment"]["model_files"]} == want
    assert attempt["environment"]["dir"] == model  # the model's directory, not its parent


def test_a_shard_deleted_after_preflight_fails_the_attempt_and_the_ledger_stays_sound(
        sharded_model, ledger, locks, tmp_path) -> None:
    copy = tmp_path / "set"
    shutil.copytree(Path(sharded_model("safetensors", "dense", shards=3).files[0].path).parent, copy)
    gone = copy / "model-00002-of-00003.safetensors"

    def delete(done: int, total: int, config: RunConfig, run: object) -> None:
        if done == 1:
            gone.unlink()

    with defaults.set_host("rig-a"):  # measured on a rig, merged below on another (never on itself: issue 19)
        (res,) = measure([RunConfig(str(copy), "pread")], runs=2, cache="cold", ledger=ledger, campaign="broken",
                         lock_dir=locks, progress=delete)
    first, second = res.runs
    assert first.ok and first.cache_reached
    assert not second.ok and "model-00002-of-00003" in second.error
    assert second.cache_reached is False and str(gone) in second.report.cache_error
    assert set(second.resident_files) == {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
                                          "model.safetensors.index.json"}  # what there was, measured
    assert res.verdict == "failed" and "the model changed during the measurement" in res.notes
    stored = ledger.attempt(res.attempt_id)
    assert stored["verdict"] == "failed" and len(ledger.runs(res.attempt_id)) == 2
    # every row passes the checks a merge applies (merged on another rig: a merge takes nothing
    # recorded under any name this machine goes by, issue 19)
    with defaults.set_host("other-rig"), Ledger(tmp_path / "other.sqlite") as other:
        assert other.merge(ledger.path)["runs"] == 2


def test_runs_of_two_sets_are_not_paired_and_a_copy_of_one_set_is(ledger, locks, tmp_path) -> None:
    a, b = write_set(tmp_path / "a", 1), write_set(tmp_path / "b", 2)
    shutil.copytree(tmp_path / "a", tmp_path / "a-copy")
    run = dict(runs=6, cache="warm", ledger=ledger, lock_dir=locks)
    base, other = measure_with(FakeRuns(), [RunConfig(str(tmp_path / "a"), "pread"),
                                            RunConfig(str(tmp_path / "b"), "pread")], **run)
    assert "another model than the baseline's" in other.notes and "rounds not paired" in other.notes
    # and its ratio says so wherever it is shown (issue 33 §2): the table line, --json, the ledger's rows
    assert other.baseline_across.startswith(f"baseline {base.attempt_id[:8]} is another model (a, ")
    assert "ACROSS: baseline" in other.effect and "ACROSS" in other.to_json()["effect"]
    assert ledger.attempt(other.attempt_id)["baseline_across"] == other.baseline_across
    assert "(independent runs)" in other.verdict_reason or other.verdict_reason == "n < 3"
    assert ledger.attempt(other.attempt_id)["file_hash"] != ledger.attempt(base.attempt_id)["file_hash"]
    base, same = measure_with(FakeRuns(), [RunConfig(str(tmp_path / "a"), "pread"),
                                           RunConfig(str(tmp_path / "a-copy"), "pread")], **run)
    assert "another model" not in same.notes and "(paired rounds)" in same.verdict_reason
    # a ledger baseline taken on another set is refused as another file is, and flagged when asked for
    with pytest.raises(BaselineMismatch, match=f"baseline {base.attempt_id[:8]} is another model"):
        measure_with(FakeRuns(), [RunConfig(b.path, "mmap")], baseline=base.attempt_id, **run)
    (later,) = measure_with(FakeRuns(), [RunConfig(b.path, "mmap")], baseline=base.attempt_id,
                            baseline_across=True, **run)
    assert f"ACROSS: baseline {base.attempt_id[:8]} is another model" in later.notes
    assert a.path != b.path


def test_a_set_rewritten_while_measured_fails_its_attempts(ledger, locks, tmp_path) -> None:
    index = write_set(tmp_path / "m", 3)
    last = index.files[-1]

    def rewrite() -> None:  # the same size, other tensor bytes: the set is another set now
        with open(last.path, "r+b") as fh:
            fh.seek(last.size - 16)
            fh.write(os.urandom(16))

    results = measure_with(FakeRuns({2: rewrite}), [RunConfig(str(tmp_path / "m"), "pread"),
                                                    RunConfig(str(tmp_path / "m"), "mmap")],
                           runs=2, cache="asis", ledger=ledger, lock_dir=locks)
    for res in results:
        assert res.verdict == "failed" and "the model changed during the measurement" in res.verdict_reason
        assert ledger.attempt(res.attempt_id)["verdict"] == "failed"


def test_merge_keeps_attempts_of_two_sets_at_one_path_apart(isolated_cache, locks, tmp_path) -> None:
    from workbench.ledger.table import latest_finished, markdown_table

    model = tmp_path / "m"
    write_set(model, 4)
    with Ledger(tmp_path / "a.sqlite") as led:
        measure_with(FakeRuns(), [RunConfig(str(model), "pread", label="pread")], runs=2, cache="asis",
                     ledger=led, campaign="c", lock_dir=locks)
    shutil.rmtree(model)
    write_set(model, 5)  # another set under the same name, on another rig
    with defaults.set_host("rig-b"), Ledger(tmp_path / "b.sqlite") as led:
        measure_with(FakeRuns(), [RunConfig(str(model), "pread", label="pread")], runs=2, cache="asis",
                     ledger=led, campaign="c", lock_dir=locks)
    fixture = Path(__file__).resolve().parent / "fixtures" / "ledger-pre-arch.sqlite"
    old = tmp_path / "old.sqlite"
    shutil.copyfile(fixture, old)  # single-file identities, schema 1
    with Ledger(tmp_path / "a.sqlite") as led:
        assert led.merge(tmp_path / "b.sqlite")["attempts"] == 1
        assert led.merge(old)["attempts"] > 0
        attempts = led.attempts("c")
        runs = {i: led.runs(i) for i in attempts["id"]}
        latest = latest_finished(attempts, runs)
        assert len(latest) == 2 and len(set(latest["file_hash"])) == 2  # two configurations, not one
        assert all(h.startswith("set:") for h in latest["file_hash"])
        everything = led.attempts()
        singles = everything[~everything["file_hash"].fillna("").str.startswith("set:")]
        assert len(singles) and all(h.startswith("xxh3_128:") for h in singles["file_hash"].dropna())
        assert "pread" in markdown_table(led, "c")
