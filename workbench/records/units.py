"""Units and names every layer shares, so none of them defines its own copy."""
from __future__ import annotations

MiB = 1 << 20
# The load window's phases, in the order a load passes through them; every LoadResult carries all
# six (zero when unused), and the figures stack them in this order. ``staging``: provisioning and
# releasing pinned staging (fresh page-locked memory is the largest fixed cost a staged load pays).
PHASES = ("index", "prefetch", "staging", "read", "upload", "sync")
