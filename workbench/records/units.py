"""Units and names every layer shares, so none of them defines its own copy."""
from __future__ import annotations

MiB = 1 << 20
# The load window's phases, in the order a load passes through them; every LoadResult carries all
# five (zero when unused), and the figures stack them in this order.
PHASES = ("index", "prefetch", "read", "upload", "sync")
