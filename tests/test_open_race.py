"""A FIFO or a device swapped in for a model file between its ``stat`` and its ``open`` (issue 24 §5).

A stat that says "regular file" proves nothing about the open after it. Every place the workbench opens
a model file — indexing (the format sniff, the safetensors and GGUF header reads), the page-cache
controls, the untouched reads behind hashing and verification, every strategy's descriptors (the load's
own, its readers', its mappings, O_DIRECT), the expert readers and the ceiling's reads — must refuse a
FIFO in one line instead of blocking on it, and a link to a character device (``/dev/zero``) instead
of reading it. The swap is made at the worst moment: right after the stat the code makes first (``os.stat``
wrapped to swap the file once it has answered), or, for a load, after the model was indexed.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from workbench.errors import WorkbenchError
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic
from workbench.strategies import STRATEGIES, get_strategy, strategy_kind
from workbench.upload import open_device

BLOCKED_S = 5.0
REAL_STAT = os.stat


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


def swap(path: Path, kind: str) -> None:
    """Put a FIFO, or a link to /dev/zero, where the file ``path`` was."""
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def refused_without_blocking(fn: Callable[[], Any], path: Path) -> str:
    """Run ``fn`` in a thread; it must end within BLOCKED_S with a WorkbenchError (its line returned).
    A thread still blocked on the FIFO is released by opening its write end, then the test fails."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - judged below
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(BLOCKED_S)
    if t.is_alive():
        if path.is_fifo():
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(BLOCKED_S)
        pytest.fail(f"blocked on {path} for {BLOCKED_S} s")
    err = out.get("error")
    assert isinstance(err, WorkbenchError), f"expected a one-line refusal, got {err!r} / {out.get('value')!r}"
    assert "\n" not in str(err)
    return str(err)


@pytest.fixture(params=["safetensors", "gguf"])
def model(request, tmp_path) -> Path:
    path = tmp_path / f"m.{request.param}"
    write_synthetic(path, format=request.param, layout="dense", size=256 << 10, seed=4)
    return path


def stats_of(monkeypatch, path: Path, fn: Callable[[], Any]) -> int:
    """How many times ``fn`` stats ``path`` (os.stat) when nothing is swapped."""
    seen = []
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: (seen.append(p) if os.fspath(p) == str(path) else None)
                        or REAL_STAT(p, *a, **k))
    try:
        fn()
    finally:
        monkeypatch.setattr(os, "stat", REAL_STAT)
    return len(seen)


def swap_after_stat(monkeypatch, path: Path, kind: str, nth: int) -> None:
    """The ``nth`` ``os.stat`` of ``path`` answers for the regular file, then the file is swapped
    (``nth`` 0: swapped before anything)."""
    seen = []
    if nth == 0:
        swap(path, kind)

    def stat_then_swap(p, *args, **kwargs):
        st = REAL_STAT(p, *args, **kwargs)
        if os.fspath(p) == str(path):
            seen.append(p)
            if len(seen) == nth:
                swap(path, kind)
        return st

    monkeypatch.setattr(os, "stat", stat_then_swap)


def _pagecache(fn_name: str) -> Callable[[str], Any]:
    def call(p: str) -> Any:
        from workbench.io import pagecache

        return getattr(pagecache, fn_name)(p)

    return call


def _hash(p: str) -> Any:
    from workbench.io.identity import hash_file

    return hash_file(p)


def _reader(kind: str) -> Callable[[str], Any]:
    def call(p: str) -> Any:
        from workbench.expert.readers import make_reader

        return make_reader(kind, p)

    return call


def _ceiling_read(p: str) -> Any:
    from workbench.measure.ceilings.reads import read_files

    return read_files([(p, os.path.getsize(p) if not os.path.islink(p) else 4096)], 1, False)


def _staged_open(p: str) -> Any:
    from workbench.upload.staged_read import _open_read_only

    return _open_read_only(p)


OPENERS = {
    "open_index": open_index, "resident_fraction": _pagecache("resident_fraction"),
    "evict_file_pages": _pagecache("evict_file_pages"), "warm_file": _pagecache("warm_file"),
    "hash_file": _hash, "reader pread": _reader("pread"), "reader direct": _reader("direct-bounce"),
    "ceiling reads": _ceiling_read, "staged reader": _staged_open,
}


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("opener", list(OPENERS))
def test_every_opener_refuses_what_was_swapped_in_after_its_stat(model, monkeypatch, opener, kind):
    """The swap at every point: before the call, and right after each stat it makes of the file."""
    pristine = model.read_bytes()
    call = lambda: OPENERS[opener](str(model))  # noqa: E731
    n = stats_of(monkeypatch, model, call)
    for nth in range(n + 1):
        if model.is_symlink() or model.exists():
            model.unlink()
        model.write_bytes(pristine)
        swap_after_stat(monkeypatch, model, kind, nth)
        line = refused_without_blocking(call, model)
        monkeypatch.setattr(os, "stat", REAL_STAT)
        assert str(model) in line, (nth, line)


OWN = [n for n in STRATEGIES if strategy_kind(n) == "strategy"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("name", OWN)
def test_a_load_refuses_a_model_file_swapped_after_indexing(model, name, kind):
    index = open_index(model)
    strategy = get_strategy(name)()
    if not strategy.available() or not strategy.fits(index, "host"):
        pytest.skip(f"{name}: not here")
    swap(model, kind)

    def load() -> Any:
        with open_device("host") as device:
            return strategy.load(index, device)

    line = refused_without_blocking(load, model)
    assert str(model) in line, line
