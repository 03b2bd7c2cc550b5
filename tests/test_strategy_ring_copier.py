"""``ring copier=one``: one issuer thread and one fence-waiting thread make every device call of a staged
load, the readers only read. Held on the deferred-copy device, where a slot refilled before its copies
ran lands the wrong bytes (tests/device_fakes.py)."""
from __future__ import annotations

import threading

import pytest

from workbench.errors import CacheStateError
from workbench.io.pagecache import prepare
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy

from device_fakes import DeferredCopyDevice

MiB = 1 << 20
LAYOUTS = {  # odd offsets and gaps, a tensor of one byte, tensors across window edges, empty ones
    "odd": dict(sizes=[(3 << 20) + 333, 5, (2 << 20) + 77, 4097, 1], first=1231, gap=29, tail=17),
    "tiny": dict(sizes=[1, 3, 0, 7, 4095, 4097], first=3, gap=1),
    "large": dict(sizes=[(9 << 20) + 4099, (6 << 20) - 1], first=4096 * 3 + 1, gap=4093),
}


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


class CallingDevice(DeferredCopyDevice):
    """Records which thread made each copy, fence record, fence wait and registration."""

    def __init__(self) -> None:
        super().__init__()
        self.callers: dict[str, set[str]] = {}

    def _note(self, what: str) -> None:
        self.callers.setdefault(what, set()).add(threading.current_thread().name)

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        self._note("copy")
        return super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)

    def record_fence(self, fence):
        self._note("record")
        return super().record_fence(fence)

    def wait_fence(self, fence):
        if fence.recorded:
            self._note("wait")
        return super().wait_fence(fence)

    def register_host(self, view):
        self._note("register")
        return super().register_host(view)


def load(index, dev, **params):
    result = get_strategy("ring")(**{"direct": "off", "copier": "one", **params}).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok, f"{report.first_mismatch}: {report.detail}"
    return result


def set_cache(path, state):
    try:
        prepare(path, state)
    except CacheStateError as exc:
        pytest.skip(f"cache state unreachable here: {exc}")


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("provision, mapping", [("first-read", "each"), ("first-read", "one"), ("upfront", "each"),
                                               ("readers", "each")])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_byte_lands_and_every_slot_is_reused_only_after_its_copies(raw_model, layout, provision, mapping, cache):
    index = raw_model(**LAYOUTS[layout])
    set_cache(index.path, cache)
    dev = DeferredCopyDevice()
    result = load(index, dev, threads=3, cold_threads=2, slot_mib=1, cold_mib=1, spare=1, fit=False,
                  provision=provision, mapping=mapping)
    fact = result.engaged_by("one_copier")
    assert fact is not None and fact.done == 1 and "readers only read" in fact.note
    assert {"copier_issue_us", "copier_fence_us", "copier_register_us"} <= set(result.counters)
    assert dev.in_flight == 0 and dev.usage().registered == 0


@pytest.mark.parametrize("copier", ["one", "readers"])
def test_only_the_copier_threads_call_the_device(raw_model, copier):
    index = raw_model(**LAYOUTS["odd"])
    set_cache(index.path, "warm")
    dev = CallingDevice()
    load(index, dev, threads=3, slot_mib=1, spare=0, fit=False, provision="first-read", copier=copier)
    readers = {name for names in dev.callers.values() for name in names if name.startswith("ring-")
               and not name.startswith("ring-copier")}
    if copier == "one":
        assert dev.callers["copy"] == dev.callers["record"] == dev.callers["register"] == {"ring-copier-issuer"}
        assert dev.callers.get("wait", set()) <= {"ring-copier-retirer", threading.current_thread().name}
        assert not readers
    else:  # the readers call the device themselves: what the copier takes off them
        assert readers and dev.callers["copy"] <= readers


class FailingDevice(DeferredCopyDevice):
    def __init__(self, what: str, after: int):
        super().__init__()
        self.what, self.after, self.calls = what, after, 0

    def _maybe_fail(self, what):
        if what == self.what:
            self.calls += 1
            if self.calls == self.after:
                raise RuntimeError(f"injected {what} failure")

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        self._maybe_fail("copy")
        return super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)

    def wait_fence(self, fence):
        if fence.recorded:
            self._maybe_fail("wait")
        return super().wait_fence(fence)


@pytest.mark.parametrize("what", ["copy", "wait"])
def test_a_failure_in_the_copier_fails_the_load_stops_the_readers_and_releases_everything(raw_model, what):
    index = raw_model(sizes=[(6 << 20) + 1, 7, (5 << 20) + 5], first=4097, gap=3)
    set_cache(index.path, "warm")
    dev = FailingDevice(what, after=3)
    before = threading.active_count()
    with pytest.raises(RuntimeError, match=f"injected {what} failure"):
        get_strategy("ring")(direct="off", copier="one", threads=3, slot_mib=1, spare=0, fit=False).load(index, dev)
    assert threading.active_count() == before  # readers, issuer and retirer all joined
    assert dev.in_flight == 0 and not dev._arrays and dev.usage().registered == 0


def test_a_failing_reader_with_a_copier_fails_the_load_and_releases_everything(raw_model, monkeypatch):
    import workbench.strategies.ring_readers as ring_readers

    index = raw_model(sizes=[(4 << 20) + 1, 7, (3 << 20) + 5])
    set_cache(index.path, "warm")
    calls, real = [], ring_readers.pread_into

    def failing(fd, view, offset, path=""):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(5, "injected read error")
        return real(fd, view, offset, path)

    monkeypatch.setattr(ring_readers, "pread_into", failing)
    dev = DeferredCopyDevice()
    before = threading.active_count()
    with pytest.raises(OSError, match="injected read error"):
        get_strategy("ring")(direct="off", copier="one", threads=2, slot_mib=1, fit=False).load(index, dev)
    assert threading.active_count() == before
    assert dev.in_flight == 0 and not dev._arrays and dev.usage().registered == 0


def test_the_copier_param_is_checked():
    from workbench.errors import ParamError

    with pytest.raises(ParamError, match="copier"):
        get_strategy("ring")(copier="many")
