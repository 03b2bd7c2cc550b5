"""Names that become parts of paths: a campaign names its directory of runs and of reports."""
from __future__ import annotations

MAX_CAMPAIGN_CHARS = 200


def campaign_name_problem(name: object) -> str | None:
    """What makes ``name`` unusable as a campaign name, or None.

    A campaign name becomes a directory (``data/runs/<campaign>``, ``data/reports/<campaign>``), so it
    may not be ``.`` or ``..``, hold a path separator or NUL, or an unprintable character (a control or
    a bidirectional override would also reach terminals and tables)."""
    if not isinstance(name, str) or not name.strip():
        return "a campaign needs a non-empty name"
    if name.strip() in (".", ".."):
        return f"a campaign cannot be named {name.strip()!r} (it would name a directory above its own)"
    if "/" in name or "\\" in name:
        return f"a campaign name cannot hold a path separator ({name[:60]!r})"
    if not name.isprintable():
        return f"a campaign name cannot hold control or invisible formatting characters ({name[:60]!r})"
    if len(name) > MAX_CAMPAIGN_CHARS:
        return f"a campaign name is at most {MAX_CAMPAIGN_CHARS} characters ({len(name)} given)"
    return None
