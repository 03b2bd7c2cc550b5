"""A decode session with ``--compute device`` on the test device: ``host`` everywhere (numpy), and
``WORKBENCH_TEST_DEVICE=cuda`` on a GPU box (torch or cupy over the backend's own buffers), where the
lead's ``benchmarks/gpu/gpu_session.sh tests`` runs it. Every upload is read back and compared."""
from __future__ import annotations

import os

import pytest

from workbench.expert.session import ExpertSession, SessionConfig
from workbench.upload import device_availability, open_device

DEVICE = os.environ.get("WORKBENCH_TEST_DEVICE", "host")


@pytest.fixture
def device():
    if not device_availability(DEVICE.partition(":")[0]):
        pytest.skip(f"{DEVICE} unavailable here")
    with open_device(DEVICE) as dev:
        yield dev


@pytest.mark.parametrize("prefetch", ["route", "oracle:precision=0.8,recall=0.8"])
@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_device_compute_over_verified_uploads(synth_model, device, fmt, prefetch):
    index = synth_model(fmt, "moe", alignment=64, size=4 << 20, experts=16)
    cfg = SessionConfig(turns=2, tokens=2, compute="device", lanes=2, overlap=True, verify=True, prefetch=prefetch)
    with ExpertSession(index, device, cfg) as s:
        records = list(s.turns())
        facts, verified = s.facts, s.verified_slices
    assert verified == sum(r.hits + r.misses for r in records) > 0
    assert all(r.compute_s > 0 for r in records)
    assert facts.compute.startswith("device (") and ("as they are" in facts.compute or "proxy" in facts.compute)
    if fmt == "gguf":
        assert "Q4_0 as a same-bytes" in facts.compute  # quantized blobs: a proxy, and it says so
