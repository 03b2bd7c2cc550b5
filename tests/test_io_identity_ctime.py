"""Issue 35 §4: the identity cache cannot be fooled by mtime, and verification never vouches for bytes
that are not the ones the attempt's identity hashed.

The attack: hash a model (``inspect``), overwrite its last 4 KiB in place, put the mtime back with
``os.utime``. Keyed by mtime the cache returned the old hash, and a run recorded it with ``verified=1``."""
from __future__ import annotations

import os
import time

import pytest
import xxhash
from click.testing import CliRunner

from workbench.io import identity
from workbench.io.identity import file_identity, hash_with_ranges


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(d))
    return d


def overwrite_tail_keeping_mtime(path, nbytes: int = 4096) -> None:
    """The issue's attack: the last ``nbytes`` rewritten in place, the times put back by ``os.utime``."""
    st = os.stat(path)
    time.sleep(0.05)  # past the coarse clock's tick: the write's ctime is a later one
    with open(path, "r+b") as fh:
        fh.seek(st.st_size - nbytes)
        fh.write(os.urandom(nbytes))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_a_tail_rewritten_in_place_with_its_mtime_put_back_gets_a_new_hash(tmp_path, monkeypatch):
    monkeypatch.setattr(identity, "RACY_NS", -1)  # cache the first hash although the file is new
    path = tmp_path / "m.bin"
    path.write_bytes(os.urandom(1 << 20))
    time.sleep(0.05)
    first = file_identity(path)
    overwrite_tail_keeping_mtime(path)
    second = file_identity(path)
    assert second.hash == "xxh3_128:" + xxhash.xxh3_128(path.read_bytes()).hexdigest()
    assert second.hash != first.hash and second.mtime_ns == first.mtime_ns


def test_a_hash_taken_in_the_tick_of_the_files_last_change_is_not_cached(tmp_path, monkeypatch):
    calls = []
    real = identity.hash_file
    monkeypatch.setattr(identity, "hash_file", lambda p: calls.append(p) or real(p))
    path = tmp_path / "m.bin"
    # "within the tick" by an hour: a loaded box that runs the next lines more than RACY_NS (1 s) after the
    # write would otherwise have the first hash cached, and the test would fail with correct code
    monkeypatch.setattr(identity, "RACY_NS", 3600 * 10**9)
    path.write_bytes(b"a" * 5000)
    file_identity(path)
    file_identity(path)  # the file changed under a second ago: a same-tick change would keep its ctime
    assert len(calls) == 2
    monkeypatch.setattr(identity, "RACY_NS", -1)
    file_identity(path)
    file_identity(path)
    assert len(calls) == 3


def test_hash_with_ranges_is_the_files_hash_and_each_ranges(tmp_path):
    data = os.urandom(3 << 20)
    path = tmp_path / "m.bin"
    path.write_bytes(data)
    ranges = [(5, 100), (1 << 20, 2 << 20), (0, 0), (len(data) - 7, 7)]
    whole, sums = hash_with_ranges(path, ranges)
    assert whole == "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()
    assert sums == [xxhash.xxh3_64(data[o:o + n]).hexdigest() for o, n in ranges]


# -- through the product: inspect, run, the ledger ------------------------------------------------------

def _model(tmp_path, monkeypatch):
    from workbench.formats.synth import write_synthetic

    monkeypatch.setattr(identity, "RACY_NS", -1)  # the model was just written: let the cache keep it
    path = tmp_path / "m.safetensors"
    write_synthetic(path, format="safetensors", layout="dense", size=2 << 20)
    time.sleep(0.05)
    return path


def _inspect_hash(path) -> str:
    from workbench.cli import main

    out = CliRunner().invoke(main, ["inspect", str(path), "--json"])
    assert out.exit_code == 0, out.output
    import json

    return json.loads(out.output)["hash"]


def test_inspect_and_run_record_the_new_hash_and_verify_against_it(tmp_path, monkeypatch):
    from workbench.ledger import Ledger
    from workbench.measure import measure
    from workbench.records import RunConfig

    path = _model(tmp_path, monkeypatch)
    old = _inspect_hash(path)
    overwrite_tail_keeping_mtime(path)
    new = "xxh3_128:" + xxhash.xxh3_128(path.read_bytes()).hexdigest()
    assert _inspect_hash(path) == new != old
    ledger = tmp_path / "l.sqlite"
    [result] = measure([RunConfig(file=str(path), strategy="pread")], runs=1, cache="asis", ledger=ledger)
    with Ledger(ledger) as led:
        attempt = led.attempt(result.attempt_id)
        assert attempt["file_hash"] == new
        assert list(led.runs(result.attempt_id)["verified"]) == [1]


def test_a_stale_identity_is_never_recorded_as_verified(tmp_path, monkeypatch, cache_dir):
    """Whatever fooled the cache (a file system that keeps no ctime, a clock set back), a run whose
    attempt recorded a hash its file's bytes do not have reads verified=0, saying why."""
    import sqlite3

    from workbench.ledger import Ledger
    from workbench.measure import measure
    from workbench.records import RunConfig

    path = _model(tmp_path, monkeypatch)
    real = os.path.realpath(path)
    stale = "xxh3_128:" + "2889c16b" * 4
    file_identity(path)  # makes the cache; then its row for the file is made to lie
    st = os.stat(real)
    with sqlite3.connect(cache_dir / "identity.sqlite") as conn:
        conn.execute("INSERT OR REPLACE INTO file_hash VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (real, st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns, stale))
    assert file_identity(path).hash == stale
    ledger = tmp_path / "l.sqlite"
    [result] = measure([RunConfig(file=str(path), strategy="pread")], runs=1, cache="asis", ledger=ledger)
    with Ledger(ledger) as led:
        assert led.attempt(result.attempt_id)["file_hash"] == stale
        runs = led.run_records(result.attempt_id)
    assert [r.verified for r in runs] == [False]
    assert "not xxh3_128:2889c16b" in runs[0].report.verify.detail
