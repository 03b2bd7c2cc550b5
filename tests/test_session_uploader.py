"""``--uploader pinned``: a session's landed slices go to the device through page-locked staging.

Held on the deferred-copy device (tests/device_fakes.py), where a slot refilled before its copy ran lands
the wrong bytes, and in a real verified session on the host backend."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from device_fakes import DeferredCopyDevice
from workbench.cli import main
from workbench.errors import ParamError
from workbench.expert.session_config import SessionConfig, check_config
from workbench.expert.uploader import ParallelUploads, PageableUploader, PinnedUploader, open_uploader

KiB = 1 << 10


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("slots", [1, 2, 8])
def test_every_slice_lands_exactly_whatever_its_size_and_the_slots_it_takes(slots, threads):
    dev = DeferredCopyDevice()
    rng = np.random.default_rng(slots)
    sizes = [1, 4097, 64 * KiB, 64 * KiB + 3, 3 * 64 * KiB + 5, 7, 64 * KiB - 1] * 3  # tiny, odd, > a slot
    arena = dev.alloc(sum(sizes) + 256 * len(sizes))
    inner = PinnedUploader(dev, slot_bytes=64 * KiB, slots=slots)
    up = inner if threads == 1 else ParallelUploads(inner, threads)
    placed, views, at = [], [], 0
    for n in sizes:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        views.append(memoryview(bytearray(data)))  # the cache's pageable memory: any buffer
        up.put(arena, at, views[-1])
        placed.append((at, data))
        at += -(-n // 256) * 256
    up.drain()
    for view in views:
        view.release()  # as the decoder does after drain: the uploader holds no export of it
    assert dev.in_flight == 0
    for at, data in placed:
        assert dev.read_back(arena, at, len(data)) == data
    up.close()
    assert dev.usage().registered == 0 and dev.usage().pinned == 0
    dev.free(arena)


class FailingCopies(DeferredCopyDevice):
    def __init__(self, after: int):
        super().__init__()
        self.after, self.calls = after, 0

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        self.calls += 1
        if self.calls == self.after:
            raise RuntimeError("injected copy failure")
        return super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)


@pytest.mark.parametrize("kind", ["pinned", "pageable"])
def test_a_failed_copy_in_a_copy_thread_is_raised_by_drain_after_every_slice_is_done(kind):
    dev = FailingCopies(after=3)
    arena = dev.alloc(16 * 4096)
    up = open_uploader(kind, dev, threads=3)
    views = [memoryview(bytearray(b"x" * 4096)) for _ in range(8)]
    for i, view in enumerate(views):
        up.put(arena, i * 4096, view)
    with pytest.raises(RuntimeError, match="injected copy failure"):
        up.drain()
    for view in views:
        view.release()  # nothing still copies out of them: every put finished before drain raised
    up.close()
    assert dev.in_flight == 0 and dev.usage().registered == 0


def test_one_thread_is_the_uploader_itself():
    dev = DeferredCopyDevice()
    assert isinstance(open_uploader("pageable", dev), PageableUploader)
    assert isinstance(open_uploader("pageable", dev, threads=2), ParallelUploads)


def test_an_unknown_uploader_is_one_param_error():
    with pytest.raises(ParamError, match="uploader"):
        check_config(SessionConfig(1, 1, uploader="dma"))
    with pytest.raises(ParamError, match="uploader"):
        open_uploader("dma", DeferredCopyDevice())
    with pytest.raises(ParamError, match="upload_threads"):
        check_config(SessionConfig(1, 1, upload_threads=0))


def test_a_pinned_session_verifies_every_upload_and_says_how_it_uploaded(synth_model, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    ledger = tmp_path / "l.sqlite"
    out = CliRunner().invoke(main, ["session", index.path, "--turns", "2", "--tokens", "3", "--cache-mib", "0.5",
                                    "--experts-per-token", "2", "--reader", "pread", "--uploader", "pinned",
                                    "--upload-threads", "3",
                                    "--lanes", "2", "--overlap", "--verify", "--ledger", str(ledger), "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["summary"]["facts"]["uploader"] == "pinned" and doc["summary"]["facts"]["upload_threads"] == 3
    from workbench.ledger import Ledger

    with Ledger(ledger) as store:
        a = store.attempts().iloc[-1]
    assert a["params"]["uploader"] == "pinned" and "uploader=pinned upload_threads=3" in a["label"]
    assert "uploads through page-locked staging by 3 copy threads" in a["notes"]
