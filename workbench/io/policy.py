"""When a load should evict the file's pages after reading them (the page-cache eviction policy).

On a unified-memory device (an APU) the page cache and "device" memory share physical RAM, so a load
that keeps the file cached holds the model twice; there, evict. On a discrete GPU the page cache is free
bandwidth for the next load; keep it. Evicting unconditionally cost one engine a full disk re-read on
every load (seeds/pr617), so the choice is explicit and recorded with where it came from.
"""
from __future__ import annotations

from workbench.settings import defaults

ENV_VAR = defaults.PAGE_EVICTION


def resolve_eviction(uma: bool, param: bool | None = None) -> tuple[bool, str]:
    """(evict, source): an explicit ``param`` wins ("param"), then $WORKBENCH_PAGE_EVICTION ("env"),
    then the device: UMA evicts ("device-uma"), discrete keeps ("device-discrete")."""
    if param is not None:
        return bool(param), "param"
    env = defaults.page_eviction()
    if env is not None:
        return env, "env"
    return (True, "device-uma") if uma else (False, "device-discrete")
