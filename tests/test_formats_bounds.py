"""Hostile index shapes are refused within a second of work (issue 24 §2).

Each test builds the shape the adversarial pass measured (1.1 M distinct missing shard names: 70.7 s;
7,000 names 2,000 directories deep: 50.8 s; a ``-of-99999`` name: 4.3 s) and the largest shape the caps
still let through, and asserts the one-line error comes after less than a second of the process's CPU
time. CPU time, not wall time: CI's 2-core VM is shared, and a loaded scheduler stretches wall time by
whatever else runs there (2–3× seen while these were written), while the work resolution does — parsing,
``realpath``'s ``lstat`` calls, ``stat`` — is CPU time of this process (user and system) and is what the
bound is about. Building the shapes is outside the measured call.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from workbench.errors import FormatError
from workbench.formats import bounds, open_index, resolve

ST_INDEX = "model.safetensors.index.json"
BOUND_S = 1.0
EMPTY_ST = b"\x08\0\0\0\0\0\0\0{}      "  # a valid safetensors file without tensors


def write_index(directory: Path, entries: list[bytes]) -> Path:
    """``model.safetensors.index.json`` with ``entries`` (``"tensor": "file"`` pairs, raw JSON)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ST_INDEX).write_bytes(b'{"metadata": {}, "weight_map": {' + b",".join(entries) + b"}}")
    return directory


def refused_within_bound(path: Path) -> tuple[str, float]:
    """The FormatError line ``open_index(path)`` gives and the CPU seconds it took."""
    t0 = time.process_time()
    with pytest.raises(FormatError) as err:
        open_index(path)
    return str(err.value), time.process_time() - t0


def test_a_million_distinct_missing_names_are_refused_before_parsing(tmp_path):
    directory = write_index(tmp_path / "m", [b'"t%d": "s%07d.safetensors"' % (i, i) for i in range(1_100_000)])
    line, cpu = refused_within_bound(directory)
    assert "about 1,100,00" in line and f"{bounds.MAX_TENSORS:,}" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


def test_the_most_distinct_names_the_caps_let_parse_stop_at_the_member_cap(tmp_path):
    n = bounds.MAX_TENSORS - 1_000
    directory = write_index(tmp_path / "m", [b'"model.layers.%d.w": "s%07d.safetensors"' % (i, i) for i in range(n)])
    line, cpu = refused_within_bound(directory)
    assert f"{bounds.MAX_MEMBERS + 1:,} files: more than the {bounds.MAX_MEMBERS:,}" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


def test_the_most_tensors_the_caps_let_into_one_missing_file(tmp_path):
    n = bounds.MAX_TENSORS - 1_000
    directory = write_index(tmp_path / "m", [b'"model.layers.%d.w": "s.safetensors"' % i for i in range(n)])
    line, cpu = refused_within_bound(directory)
    assert "missing shard" in line and f"(and {n - 1} more)" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


def test_deep_names_are_refused_on_the_string(tmp_path):
    deep = "/".join(["d"] * 2_000).encode()
    directory = write_index(tmp_path / "m", [b'"t%d": "%s/s%d.safetensors"' % (i, deep, i) for i in range(7_000)])
    (directory / "d").mkdir()  # the first directory exists: realpath would walk on
    line, cpu = refused_within_bound(directory)
    assert "2,001" not in line and "2001 path components deep" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


def test_a_name_longer_than_a_file_name_can_be(tmp_path):
    directory = write_index(tmp_path / "m", [b'"t": "%s.safetensors"' % (b"x" * 300)])
    line, _ = refused_within_bound(directory)
    assert "longer than a file name can be (255 bytes)" in line, line


def test_a_shard_count_above_the_cap_is_refused_by_name(tmp_path):
    first = tmp_path / "model-00001-of-99999.safetensors"
    first.write_bytes(EMPTY_ST)
    line, cpu = refused_within_bound(first)
    assert f"99,999 files: more than the {bounds.MAX_MEMBERS:,}" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


def test_a_directory_of_more_files_than_a_set_may_have(tmp_path):
    directory = tmp_path / "m"
    directory.mkdir()
    n = bounds.MAX_MEMBERS + 1  # one complete numbered set, the directory's model (issue 23's resolution)
    for i in range(1, n + 1):
        (directory / f"model-{i:05d}-of-{n:05d}.safetensors").write_bytes(EMPTY_ST)
    line, cpu = refused_within_bound(directory)
    assert f"{bounds.MAX_MEMBERS + 1:,} files" in line, line
    assert cpu < BOUND_S, f"{cpu:.2f} s of CPU"


@pytest.mark.parametrize("shape", ["index", "numbered"])
def test_members_are_checked_one_at_a_time_and_the_first_failure_stops(tmp_path, monkeypatch, shape):
    """Within the caps, a set whose second member is missing looks at no third one (before: every
    member was confined — a realpath each — before the first was stat'ed)."""
    directory = tmp_path / "m"
    directory.mkdir()
    n = 3_000
    (directory / f"model-00001-of-{n:05d}.safetensors").write_bytes(EMPTY_ST)
    if shape == "index":
        write_index(directory, [b'"t%d": "model-%05d-of-%05d.safetensors"' % (i, i, n) for i in range(1, n + 1)])
    calls: list[str] = []
    real = os.path.realpath
    monkeypatch.setattr(resolve.os.path, "realpath", lambda p, *a, **k: calls.append(p) or real(p, *a, **k))
    with pytest.raises(FormatError, match="model-00002-of-03000.safetensors: path: missing shard"):
        open_index(directory if shape == "index" else directory / f"model-00001-of-{n:05d}.safetensors")
    assert len(calls) < 20, f"{len(calls)} realpath calls"


def test_a_member_two_directories_down_still_loads(tmp_path):
    """The caps refuse shapes, not layouts: a member in a subdirectory of the index's is a member."""
    from workbench.formats.synth import write_synthetic

    src = tmp_path / "src"
    write_synthetic(src, format="safetensors", layout="dense", size=256 << 10, shards=2, seed=1)
    model = tmp_path / "m"
    (model / "a" / "b").mkdir(parents=True)
    import json

    doc = json.loads((src / ST_INDEX).read_text())
    for name in set(doc["weight_map"].values()):
        (src / name).rename(model / "a" / "b" / name)
    doc["weight_map"] = {t: f"a/b/{f}" for t, f in doc["weight_map"].items()}
    (model / ST_INDEX).write_text(json.dumps(doc))
    index = open_index(model)
    assert len(index.files) == 2 and all("/a/b/" in f.path for f in index.files)
