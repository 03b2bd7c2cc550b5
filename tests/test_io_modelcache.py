"""Page-cache control over a model that is a set of files: every file evicted / resident and checked
with mincore, per file and for the model; the file that cannot reach the state is the one named."""
from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path

import pytest

from workbench.errors import CacheStateError, FormatError
from workbench.io import modelcache
from workbench.io.envinfo import eviction_support
from workbench.io.modelcache import model_files, model_residency, prepare_model
from workbench.io.pagecache import evict_file_pages, page_size, resident_fraction, warm_file


@pytest.fixture(params=["safetensors", "gguf"])
def model(request, sharded_model, tmp_path):
    if not eviction_support(tmp_path):
        pytest.skip(f"fadvise cannot drop pages here: {eviction_support(tmp_path).reason}")
    index = sharded_model(request.param, "dense", shards=3)
    for f in index.files:
        evict_file_pages(f.path)
    return index


def test_every_way_of_naming_the_set_gives_its_files(model) -> None:
    directory = os.path.dirname(model.files[0].path)
    files = model_files(model)
    want = tuple(f.path for f in model.files) + ((model.index_file,) if model.index_file else ())
    assert files.paths == want and len(model.files) == 3
    assert files.sizes[:3] == tuple(os.path.getsize(f.path) for f in model.files)
    assert files.data_bytes == model.size and files.n_data_files == 3
    for named in (directory, model.files[1].path, model.path):  # a directory, a shard, the canonical path
        assert model_files(named).paths == want
    assert files.name == os.path.basename(directory)
    assert files.describe("DIR") == f"DIR (3 files, {model.size / 1e9:.2f} GB)"


def test_cold_and_warm_are_set_and_checked_on_every_file(model) -> None:
    paths = model_files(model).paths
    warm = prepare_model(model, "warm")
    assert [f.path for f in warm.files] == list(paths)
    assert all(f.resident >= 0.98 for f in warm.files) and warm.resident >= 0.98
    assert all(resident_fraction(p) >= 0.98 for p in paths)
    cold = prepare_model(os.path.dirname(paths[0]), "cold")
    assert set(cold.by_name()) == {os.path.basename(p) for p in paths}
    assert all(v <= 0.02 for v in cold.by_name().values()) and cold.resident <= 0.02
    assert all(resident_fraction(p) <= 0.02 for p in paths)  # mincore agrees, file by file


def test_asis_measures_each_file_and_weighs_the_model_by_pages(model) -> None:
    prepare_model(model, "cold")
    second = model.files[1]
    warm_file(second.path)
    got = prepare_model(model, "asis")
    by_name = got.by_name()
    assert by_name[second.name] >= 0.98 and by_name[model.files[0].name] <= 0.02
    pages = {f.name: f.pages for f in got.files}
    want = sum(by_name[n] * pages[n] for n in pages) / sum(pages.values())
    assert got.resident == pytest.approx(want) and 0.1 < got.resident < 0.9
    assert model_residency(model).by_name() == pytest.approx(by_name)


def test_warm_reads_only_the_files_not_resident_yet(model, monkeypatch) -> None:
    prepare_model(model, "cold")
    warm_file(model.files[0].path)
    read = []
    real = modelcache.prepare
    monkeypatch.setattr(modelcache, "prepare", lambda path, state, **kw: read.append(path) or real(path, state, **kw))
    prepare_model(model, "warm")
    assert model.files[0].path not in read and model.files[2].path in read
    read.clear()
    prepare_model(model, "warm")
    assert read == []  # all resident: nothing read again


def test_a_pinned_shard_is_the_file_named(model) -> None:
    pinned = model.files[1].path
    with open(pinned, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
        bytes(m)  # fault every page into this process: mapped pages cannot be dropped
        with pytest.raises(CacheStateError) as err:
            prepare_model(model, "cold")
    assert err.value.path == pinned and err.value.wanted == "cold" and err.value.resident > 0.5
    assert pinned in str(err.value)


def test_a_set_pushed_out_while_its_other_files_are_read_is_not_warm(model, monkeypatch) -> None:
    prepare_model(model, "cold")
    first, last = model.files[0].path, model_files(model).paths[-1]
    real = modelcache.prepare

    def memory_pressure(path, state, **kw):  # as if reading the last file evicted the first one
        got = real(path, state, **kw)
        if path == last:
            evict_file_pages(first)
        return got

    monkeypatch.setattr(modelcache, "prepare", memory_pressure)
    with pytest.raises(CacheStateError, match="still resident after the other") as err:
        prepare_model(model, "warm")
    assert err.value.path == first and err.value.wanted == "warm" and "free memory" in str(err.value)


def test_a_shard_deleted_after_resolving_is_named(sharded_model, tmp_path) -> None:
    src = Path(sharded_model("safetensors", "dense", shards=3).files[0].path).parent
    copy = tmp_path / "set"
    shutil.copytree(src, copy)
    files = model_files(copy)
    gone = files.paths[1]
    os.unlink(gone)
    with pytest.raises(FormatError) as err:
        prepare_model(files, "cold")  # resolved before: the missing member is the error
    assert err.value.path == gone
    with pytest.raises(FormatError, match="00002"):
        model_files(copy)  # resolved now: the set itself is broken


def test_any_file_takes_a_file_no_format_reads(tmp_path) -> None:
    blob = tmp_path / "engine.bin"
    blob.write_bytes(os.urandom(5 * page_size() + 7))
    with pytest.raises(FormatError):
        model_files(blob)
    files = model_files(blob, any_file=True)
    assert files.paths == (str(blob),) and files.index is None and files.data_bytes == blob.stat().st_size
    assert prepare_model(blob, "warm", any_file=True).by_name() == {"engine.bin": 1.0}
    with pytest.raises(FormatError):  # a directory with no model in it is never "a file"
        model_files(tmp_path, any_file=True)


def test_unknown_state_is_refused(model) -> None:
    with pytest.raises(CacheStateError, match="unknown cache state"):
        prepare_model(model, "lukewarm")
