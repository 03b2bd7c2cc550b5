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
from workbench.expert.uploader import PinnedUploader, open_uploader

KiB = 1 << 10


@pytest.mark.parametrize("slots", [1, 2, 8])
def test_every_slice_lands_exactly_whatever_its_size_and_the_slots_it_takes(slots):
    dev = DeferredCopyDevice()
    rng = np.random.default_rng(slots)
    sizes = [1, 4097, 64 * KiB, 64 * KiB + 3, 3 * 64 * KiB + 5, 7, 64 * KiB - 1]  # tiny, odd, > a slot
    arena = dev.alloc(sum(sizes) + 256 * len(sizes))
    up = PinnedUploader(dev, slot_bytes=64 * KiB, slots=slots)
    placed, at = [], 0
    for n in sizes:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        view = memoryview(bytearray(data))  # the cache's pageable memory: any buffer
        up.put(arena, at, view)
        view.release()  # as the decoder does after put: the uploader holds no export of it
        placed.append((at, data))
        at += -(-n // 256) * 256
    up.drain()
    assert dev.in_flight == 0
    for at, data in placed:
        assert dev.read_back(arena, at, len(data)) == data
    up.close()
    assert dev.usage().registered == 0 and dev.usage().pinned == 0
    dev.free(arena)


def test_an_unknown_uploader_is_one_param_error():
    with pytest.raises(ParamError, match="uploader"):
        check_config(SessionConfig(1, 1, uploader="dma"))
    with pytest.raises(ParamError, match="uploader"):
        open_uploader("dma", DeferredCopyDevice())


def test_a_pinned_session_verifies_every_upload_and_says_how_it_uploaded(synth_model, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))
    index = synth_model("gguf", "moe", alignment=64, size=16 << 20, experts=64)
    ledger = tmp_path / "l.sqlite"
    out = CliRunner().invoke(main, ["session", index.path, "--turns", "2", "--tokens", "3", "--cache-mib", "0.5",
                                    "--experts-per-token", "2", "--reader", "pread", "--uploader", "pinned",
                                    "--lanes", "2", "--overlap", "--verify", "--ledger", str(ledger), "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["summary"]["facts"]["uploader"] == "pinned"
    from workbench.ledger import Ledger

    with Ledger(ledger) as store:
        a = store.attempts().iloc[-1]
    assert a["params"]["uploader"] == "pinned" and "uploader=pinned" in a["label"]
    assert "uploads through page-locked staging" in a["notes"]
