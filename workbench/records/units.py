"""Units and names every layer shares, so none of them defines its own copy."""
from __future__ import annotations

MiB = 1 << 20
# The load window's phases, in the order a load passes through them; every LoadResult carries all
# six (zero when unused), and the figures stack them in this order. ``staging``: provisioning and
# releasing pinned staging (fresh page-locked memory is the largest fixed cost a staged load pays).
PHASES = ("index", "prefetch", "staging", "read", "upload", "sync")


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 attempt``, ``2 attempts``, ``0 attempts`` (``many`` for an irregular plural: ``1 entry``/``entries``)."""
    return f"{n} {word if n == 1 else many or word + 's'}"
