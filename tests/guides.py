"""Where the commands and examples a reader follows are: the README and every guide of the manual."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def guide_files(root: Path = ROOT) -> list[Path]:
    """The README, then every guide in ``docs/`` (``docs/*.md``: a guide added later is one of them).
    The results files under ``docs/benchmarks/`` and ``docs/hardening/`` are records, not guides."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def section(heading: str, root: Path = ROOT) -> tuple[Path, str]:
    """The file whose heading (any level) is ``heading``, and the text under it up to the next heading of
    the same or a higher level."""
    for path in guide_files(root):
        text = path.read_text()
        found = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
        if found:
            rest = text[found.end():]
            end = re.search(rf"^#{{1,{len(found[1])}}} ", rest, re.M)
            return path, rest[: end.start()] if end else rest
    raise AssertionError(f"no guide has a section '{heading}'")
