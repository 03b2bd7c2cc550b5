"""benchmarks/probe/probe_staging.py's cases run on the host backend and give back what they take (the H200
call runs them once, with no room for a retry)."""
from __future__ import annotations


import pytest

from workbench.upload.host import HostDevice

MiB = 1 << 20


@pytest.fixture()
def probe(bench_module):
    return bench_module("probe_staging")


def test_copy_shapes_times_each_shape_and_releases_everything(probe):
    with HostDevice() as dev:
        before = dev.usage()
        out = probe.copy_shapes(dev, total=4 * MiB, piece=MiB, slots=2)
        assert set(out) == {"one_copy_gbps", "copies_of_1MiB_gbps", "copies_of_1MiB_split_in_two_gbps",
                            "copies_from_2_registered_slots_gbps"}
        assert all(v > 0 for v in out.values())
        assert dev.usage() == before


def test_register_each_times_every_slot_alone_and_under_readers(probe, tmp_path):
    f = tmp_path / "warm.bin"
    f.write_bytes(bytes(range(256)) * (64 * 1024))  # 16 MiB
    with HostDevice() as dev:
        before = dev.usage()
        assert len(probe.register_each(dev, MiB, 3)) == 3
        took = probe.register_each(dev, MiB, 3, str(f), readers=2)
        assert len(took) == 3 and all(t >= 0 for t in took)
        assert dev.usage() == before
