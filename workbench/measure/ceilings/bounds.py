"""Which measured wall bounds an attempt: the ceiling its GB/s is reported against."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from workbench.records import LoadPath

if TYPE_CHECKING:
    from workbench.ledger import Ledger


def backend_of(spec: str) -> str:
    """Ceiling names go by backend: ``cuda:1`` → cuda; ``host-uma`` copies like ``host``."""
    name = spec.partition(":")[0]
    return "host" if name.startswith("host") else name


def host_ceilings(ledger: Ledger, host: str | None = None, model: str | None = None) -> dict[str, float]:
    """The latest GB/s of each ceiling recorded for ``host`` (default: this machine).

    With ``model`` (the path a model resolves to), a whole-model read (``*_read_file_*``) is kept only
    when it read that model — every file of it; another model's says nothing about this one's files."""
    from workbench.settings.defaults import host_id

    frame = ledger.ceilings(host=host or host_id())
    return {str(n): float(g) for n, g, detail in zip(frame["name"], frame["gbps"], frame["detail"])
            if model is None or "_read_file_" not in str(n) or _read_model(detail, model)}


def _read_model(detail: Mapping[str, Any] | None, model: str) -> bool:
    """Whether a whole-model wall's ``detail`` names ``model`` (walls before sets name the file read)."""
    import os

    read = (detail or {}).get("model") or (detail or {}).get("file")
    return bool(read) and os.path.realpath(str(read)) == os.path.realpath(model)


def bounding_ceiling(walls: Mapping[str, float], state: str | None, device: str,
                     path: LoadPath | None = None) -> tuple[str, float] | None:
    """The wall an attempt is up against, given what its load actually did (``path``).

    cold → the disk's best read of the kind the load used (O_DIRECT or buffered; any thread count:
    readahead gives even one reader concurrency, and the disk is the physical wall); O_DIRECT reads
    hit the disk whatever the cache holds, so they are bounded by it in the warm state too.
    warm → min(page-cache read with the load's number of reader threads, host→device copy from the
    memory the load copied from). Without ``path`` the best wall of each kind (the optimistic bound).
    A read of the whole model file (``*_read_file_*``, measured with ``measure_ceilings(file=...)``)
    is preferred for buffered reads when recorded: it is the same size and place as the load's.
    """
    if state not in ("cold", "warm"):
        return None
    if state == "cold" or (path is not None and path.direct):
        kind = "" if path is None else "direct_" if path.direct else "buffered_"
        whole = None if kind == "direct_" else _best_wall(walls, "cold_read_file_")
        return whole or _best_wall(walls, f"cold_read_{kind}") or _best_wall(walls, "cold_read_")
    readers = None if path is None else path.readers
    # no reader threads (readers 0: the copy itself reads the pages) or unknown: the best of its kind
    whole = _best_wall(walls, "page_cache_read_file_") if not readers else \
        _threads_wall(walls, "page_cache_read_file_", readers, fewer_only=True)
    cache = whole or _threads_wall(walls, "page_cache_read_", readers) or _best_wall(walls, "page_cache_read_")
    copy_from = None if path is None else path.copy_from
    source = {"mmap": "pageable"}.get(copy_from or "", copy_from)
    prefix = f"h2d_{backend_of(device)}_"
    copy = (f"{prefix}{source}", walls[f"{prefix}{source}"]) if f"{prefix}{source}" in walls else None
    if copy_from == "none":  # read straight into the device's (host) memory: no copy to bound it
        return cache
    found = [w for w in (cache, copy or _best_wall(walls, prefix)) if w]
    return min(found, key=lambda w: w[1]) if found else None


def _best_wall(walls: Mapping[str, float], prefix: str) -> tuple[str, float] | None:
    hits = [(n, g) for n, g in walls.items() if n.startswith(prefix)]
    return max(hits, key=lambda h: h[1]) if hits else None


def _threads_wall(walls: Mapping[str, float], prefix: str, readers: int | None,
                  fewer_only: bool = False) -> tuple[str, float] | None:
    """The ``<prefix><N>t`` wall with the most threads not above ``readers`` (else the fewest, unless
    ``fewer_only``: a whole-file wall read with more threads than the load had does not bound it)."""
    if not readers:
        return None
    measured = {}
    for name, gbps in walls.items():
        tail = name[len(prefix):]
        if name.startswith(prefix) and tail.endswith("t") and tail[:-1].isdigit():
            measured[int(tail[:-1])] = (name, gbps)
    if not measured:
        return None
    fitting = [n for n in measured if n <= readers]
    if not fitting and fewer_only:
        return None
    return measured[max(fitting) if fitting else min(measured)]

def read_wall(walls: Mapping[str, float], state: str, readers: int, direct: bool) -> tuple[str, float] | None:
    """The wall of reading alone (no copy to a device), for ``readers`` threads: the disk's best read
    of that kind when cold (O_DIRECT reads always), else the page cache's at that thread count."""
    if state == "cold" or direct:
        kind = "direct_" if direct else "buffered_"
        return _best_wall(walls, f"cold_read_{kind}") or _best_wall(walls, "cold_read_")
    return (_threads_wall(walls, "page_cache_read_", readers) or _best_wall(walls, "page_cache_read_file_")
            or _best_wall(walls, "page_cache_read_"))
