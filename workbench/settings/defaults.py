"""Every ``WORKBENCH_*`` environment variable and the data root, resolved in one place.

Explicit arguments always win; what is here are the defaults behind them. Each getter reads the
environment when it is called, so a test's ``monkeypatch.setenv`` or a notebook's change takes effect
at once. Each ``set_*`` context manager sets its variable for the block and restores it afterwards,
in the environment itself: worker processes and notebook kernels started inside the block see the
same value (an in-process override would silently not reach them).

====================== ============================= ==============================================
variable               getter                        default
====================== ============================= ==============================================
WORKBENCH_DATA         :func:`data_root`             the checkout's ``data/`` above the cwd, else ./data
WORKBENCH_LEDGER       :func:`ledger_path`           ``<data root>/ledger.sqlite``
WORKBENCH_HOST         :func:`host_id`               hostname + /etc/machine-id prefix
WORKBENCH_LOCK_DIR     :func:`lock_dir`              /tmp/workbench-locks
WORKBENCH_CACHE_DIR    :func:`cache_dir`             ~/.cache/workbench
WORKBENCH_PAGE_EVICTION :func:`page_eviction`        None: the device decides (UMA evicts)
WORKBENCH_BATCH        :func:`batch`                 False: notebooks ask their kernel
WORKBENCH_LEDGER_BUSY_TIMEOUT :func:`ledger_busy_timeout` 60 s: how long a ledger write waits for a lock
WORKBENCH_STRATEGIES   :func:`extra_strategies`      unset: the registry's strategies only
WORKBENCH_TEST_FAULT   :func:`injected_fault`            unset: the worker injects no fault
WORKBENCH_BROWSER      :func:`browser_path`          $BROWSER_PATH, /usr/bin/chromium, chromium on PATH
WORKBENCH_CEILINGS_MAX_AGE_DAYS :func:`ceilings_max_age_days` 30: older ceilings are called stale
====================== ============================= ==============================================

``WORKBENCH_TEST_DEVICE`` is the test suite's own (which backend the shared strategy suite loads on).
``WORKBENCH_TEST_FAULT`` is the tests' too: a worker crashes, hangs or goes silent on purpose when it
is set (see ``workbench/measure/run/faults.py``); nothing the workbench ships sets it.

This module is the one place to import them from. The first five variables (where data lives, this
machine) are read in :mod:`workbench.settings.paths` and re-exported here; both read and set the
environment through :mod:`workbench.settings.env`.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

from workbench.settings.env import _env, _setenv  # noqa: F401 - _setenv: tests set a variable through it
# Where data lives and this machine (re-exported: users, tests and the package import them from here).
from workbench.settings.paths import (  # noqa: F401
    CACHE_DIR, DATA, DEFAULT_LOCK_DIR, HOST, LEDGER, LOCK_DIR, cache_dir, data_root, host_id, ledger_path,
    lock_dir, machine_host_id, models_dir, reports_dir, runs_dir, set_cache_dir, set_data_root, set_host,
    set_ledger_path, set_lock_dir,
)
from workbench.errors import ParamError

PAGE_EVICTION = "WORKBENCH_PAGE_EVICTION"
BATCH = "WORKBENCH_BATCH"
LEDGER_BUSY_TIMEOUT = "WORKBENCH_LEDGER_BUSY_TIMEOUT"
TEST_FAULT = "WORKBENCH_TEST_FAULT"
BROWSER = "WORKBENCH_BROWSER"
CEILINGS_MAX_AGE_DAYS = "WORKBENCH_CEILINGS_MAX_AGE_DAYS"
STRATEGIES = "WORKBENCH_STRATEGIES"

DEFAULT_LEDGER_BUSY_TIMEOUT_S = 60.0
DEFAULT_CEILINGS_MAX_AGE_DAYS = 30.0
# Debian's package (what .ci/run installs); kaleido never downloads a browser of its own here.
BROWSER_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


# -- behaviour -------------------------------------------------------------------------------------


def page_eviction() -> bool | None:
    """``$WORKBENCH_PAGE_EVICTION`` as True/False; None when unset (the device decides).

    Raises
    ------
    ParamError
        When it is set to anything but 1/0 (true/false, yes/no, on/off).
    """
    raw = _env(PAGE_EVICTION).lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw:
        raise ParamError("environment", PAGE_EVICTION, f"expected 1 or 0, got {os.environ[PAGE_EVICTION]!r}")
    return None


@contextmanager
def set_page_eviction(evict: bool | None) -> Iterator[None]:
    with _setenv(PAGE_EVICTION, None if evict is None else str(int(evict))):
        yield


def batch() -> bool:
    """``WORKBENCH_BATCH=1``: notebooks run their parameters at once instead of waiting for Run."""
    return _env(BATCH) == "1"


@contextmanager
def set_batch(on: bool | None) -> Iterator[None]:
    with _setenv(BATCH, None if on is None else str(int(on))):
        yield


def ledger_busy_timeout() -> float:
    """Seconds a ledger write waits for another writer's lock before it fails:
    ``$WORKBENCH_LEDGER_BUSY_TIMEOUT``, else 60.

    Raises
    ------
    ParamError
        When it is set to anything but a positive number.
    """
    raw = _env(LEDGER_BUSY_TIMEOUT)
    if not raw:
        return DEFAULT_LEDGER_BUSY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ParamError("environment", LEDGER_BUSY_TIMEOUT, f"expected seconds > 0, got {raw!r}")
    return value


@contextmanager
def set_ledger_busy_timeout(seconds: float | None) -> Iterator[None]:
    with _setenv(LEDGER_BUSY_TIMEOUT, None if seconds is None else repr(float(seconds))):
        yield


def injected_fault() -> str:
    """``$WORKBENCH_TEST_FAULT``: the fault a test asks workers to inject ('' when unset; see
    ``workbench.measure.run.faults``). Only tests set it."""
    return _env(TEST_FAULT)


@contextmanager
def set_injected_fault(spec: str | None) -> Iterator[None]:
    with _setenv(TEST_FAULT, spec):
        yield


def browser_path() -> str:
    """The Chrome/Chromium that draws static figures (kaleido): ``$WORKBENCH_BROWSER`` (``none``: draw
    none), else choreographer's ``$BROWSER_PATH``, else Debian's /usr/bin/chromium, else a chromium
    or google-chrome on ``PATH``; '' when there is none. Never a downloaded browser."""
    import shutil

    named = _env(BROWSER) or _env("BROWSER_PATH")
    if named.lower() == "none":
        return ""
    if named:
        return named
    for candidate in BROWSER_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return ""


@contextmanager
def set_browser_path(path: str | None) -> Iterator[None]:
    with _setenv(BROWSER, path):
        yield


def ceilings_max_age_days() -> float:
    """Days after which a machine's ceilings are called stale: ``$WORKBENCH_CEILINGS_MAX_AGE_DAYS``,
    else 30.

    Raises
    ------
    ParamError
        When it is set to anything but a positive number.
    """
    raw = _env(CEILINGS_MAX_AGE_DAYS)
    if not raw:
        return DEFAULT_CEILINGS_MAX_AGE_DAYS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ParamError("environment", CEILINGS_MAX_AGE_DAYS, f"expected days > 0, got {raw!r}")
    return value


@contextmanager
def set_ceilings_max_age_days(days: float | None) -> Iterator[None]:
    with _setenv(CEILINGS_MAX_AGE_DAYS, None if days is None else repr(float(days))):
        yield


def extra_strategies() -> dict[str, str]:
    """``$WORKBENCH_STRATEGIES``: strategies registered beside the registry's own, without editing it —
    ``name=module:Class`` entries separated by commas, each module importable (on ``PYTHONPATH``), so
    the CLI, workers and notebooks all see them; ``{}`` when unset.

    Raises
    ------
    ParamError
        For an entry that is not ``name=module:Class``.
    """
    out = {}
    for item in filter(None, (part.strip() for part in _env(STRATEGIES).split(","))):
        name, sep, target = item.partition("=")
        module, colon, cls = target.strip().partition(":")
        if not sep or not name.strip() or not colon or not module or not cls:
            raise ParamError("environment", STRATEGIES, f"expected name=module:Class entries separated by "
                                                        f"commas, got {item!r}")
        out[name.strip()] = target.strip()
    return out


@contextmanager
def set_extra_strategies(entries: Mapping[str, str] | None) -> Iterator[None]:
    with _setenv(STRATEGIES, None if entries is None else ",".join(f"{k}={v}" for k, v in entries.items())):
        yield
