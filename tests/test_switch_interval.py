"""switch_interval_us: the interpreter's switch interval a session runs under (the lanes and the decode thread
share one lock), set while the session is open and put back as it was when it closes, however it closes."""
from __future__ import annotations

import sys

import pytest

from workbench.errors import ParamError
from workbench.expert.decode import Decoder
from workbench.expert.session import ExpertSession
from workbench.expert.session_config import SessionConfig, check_config
from workbench.formats import open_index
from workbench.formats.synth import write_synthetic
from workbench.measure.session.ab import parse_ab
from workbench.measure.session.runner import session_label
from workbench.upload.host import HostDevice


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = write_synthetic(tmp_path_factory.mktemp("switch") / "m.gguf", format="gguf", layout="moe", size=4 << 20,
                           experts=8, alignment=32, expert_stride="odd", seed=5).path
    return open_index(path)


@pytest.fixture
def restore_interval():
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


def _seen_while_planning(model, monkeypatch, **kw) -> tuple[list[float], int]:
    seen: list[float] = []
    real = Decoder._plan
    monkeypatch.setattr(Decoder, "_plan", lambda self, t, i: (seen.append(sys.getswitchinterval()), real(self, t, i))[1])
    cfg = SessionConfig(turns=2, tokens=2, lanes=2, overlap=True, verify=True, **kw)
    with ExpertSession(model, HostDevice(), cfg) as s:
        records = list(s.turns())
        verified = s.verified_slices
    assert sum(r.misses for r in records) > 0
    return seen, verified


def test_the_session_runs_under_the_interval_and_puts_the_old_one_back(model, monkeypatch, restore_interval):
    sys.setswitchinterval(0.004)
    seen, verified = _seen_while_planning(model, monkeypatch, switch_interval_us=250)
    assert seen and all(v == pytest.approx(250e-6) for v in seen)
    assert verified > 0  # the bytes still land as they should
    assert sys.getswitchinterval() == pytest.approx(0.004)


def test_zero_leaves_the_interval_as_it_is(model, monkeypatch, restore_interval):
    sys.setswitchinterval(0.003)
    seen, _ = _seen_while_planning(model, monkeypatch)
    assert seen and all(v == pytest.approx(0.003) for v in seen)
    assert sys.getswitchinterval() == pytest.approx(0.003)


def test_a_session_that_fails_to_open_puts_it_back_too(model, restore_interval):
    sys.setswitchinterval(0.002)
    cfg = SessionConfig(turns=1, tokens=1, switch_interval_us=100, cache_mib=1e-6)  # too small for a token's experts
    with pytest.raises(ParamError):
        ExpertSession(model, HostDevice(), cfg)
    assert sys.getswitchinterval() == pytest.approx(0.002)


@pytest.mark.parametrize("bad", [-1, 1_000_001])
def test_an_interval_out_of_range_is_one_line(bad):
    with pytest.raises(ParamError) as err:
        check_config(SessionConfig(turns=1, tokens=1, switch_interval_us=bad))
    assert "switch_interval_us" in str(err.value) and "\n" not in str(err.value)


def test_an_ab_arm_sets_it_and_the_label_names_it():
    base = SessionConfig(turns=2, tokens=2, lanes=2, overlap=True)
    arm = parse_ab("switch_interval_us=250", base, "warm", "host")
    assert arm.config.switch_interval_us == 250 and arm.changed == ("switch_interval_us",)
    assert " switch=250us " in session_label("m.gguf", arm.config)
    assert "switch=" not in session_label("m.gguf", base)
