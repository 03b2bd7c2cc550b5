"""When a load should evict the file's pages after reading them (the page-cache eviction policy).

On a unified-memory device (an APU) the page cache and "device" memory share physical RAM, so a load
that keeps the file cached holds the model twice; there, evict. On a discrete GPU the page cache is free
bandwidth for the next load; keep it. Evicting unconditionally cost one engine a full disk re-read on
every load (seeds/pr617), so the choice is explicit and recorded with where it came from.
"""
from __future__ import annotations

import os

from workbench.errors import ParamError

ENV_VAR = "WORKBENCH_PAGE_EVICTION"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def resolve_eviction(uma: bool, param: bool | None = None) -> tuple[bool, str]:
    """(evict, source): an explicit ``param`` wins ("param"), then $WORKBENCH_PAGE_EVICTION ("env"),
    then the device: UMA evicts ("device-uma"), discrete keeps ("device-discrete")."""
    if param is not None:
        return bool(param), "param"
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw in _TRUE:
        return True, "env"
    if raw in _FALSE:
        return False, "env"
    if raw:
        raise ParamError("environment", ENV_VAR, f"expected 1 or 0, got {os.environ[ENV_VAR]!r}")
    return (True, "device-uma") if uma else (False, "device-discrete")
