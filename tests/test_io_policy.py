"""The eviction policy: explicit parameter, then environment, then the device kind."""
from __future__ import annotations

import pytest

from workbench.errors import ParamError
from workbench.io.policy import ENV_VAR, resolve_eviction


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_device_default():
    assert resolve_eviction(uma=True) == (True, "device-uma")
    assert resolve_eviction(uma=False) == (False, "device-discrete")


@pytest.mark.parametrize("value, expected", [("1", True), ("0", False), (" true ", True), ("OFF", False)])
def test_env_overrides_device(monkeypatch, value, expected):
    monkeypatch.setenv(ENV_VAR, value)
    assert resolve_eviction(uma=not expected) == (expected, "env")


def test_param_overrides_env(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "1")
    assert resolve_eviction(uma=True, param=False) == (False, "param")
    assert resolve_eviction(uma=False, param=True) == (True, "param")


def test_empty_env_is_unset(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "")
    assert resolve_eviction(uma=True) == (True, "device-uma")


def test_bad_env_value(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "sometimes")
    with pytest.raises(ParamError, match=ENV_VAR):
        resolve_eviction(uma=False)
    assert resolve_eviction(uma=False, param=True) == (True, "param")  # explicit still wins
