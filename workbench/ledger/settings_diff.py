"""The load-path settings that differ between an attempt and its baseline, as lines for the PR table and
the report: a 1.3× that came with ``read_ahead_kb 128 → 8192`` is not the strategy's alone.

Compared: the attempt environment's ``settings`` (``workbench env`` lists them) and a few facts
beside them (``records/settings.py``); states that move by themselves (current CPU MHz, swap in use,
an idle GPU link's current generation) are not.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from workbench.records import format_differences, settings_differences

if TYPE_CHECKING:
    import pandas as pd

Lookup = Callable[[str], "Mapping[str, Any] | None"]


def settings_lines(shown: pd.DataFrame, attempts: pd.DataFrame, lookup: Lookup | None = None) -> list[str]:
    """Markdown lines: a heading and one line per shown attempt whose settings differ from its
    baseline's; one line saying none differ when every compared pair matched; [] when no attempt has a
    baseline with recorded settings. ``lookup`` finds a baseline outside ``attempts`` (its environment)."""
    environments = {a: e for a, e in zip(attempts["id"], attempts["environment"])}
    differing, compared, unrecorded = [], 0, 0
    for a in shown.to_dict("records"):
        base = a.get("baseline_id")
        if not isinstance(base, str) or not base:
            continue
        theirs = environments[base] if base in environments else (lookup(base) if lookup else None)
        diffs = settings_differences(theirs, a.get("environment"))
        if diffs is None:
            unrecorded += 1
            continue
        compared += 1
        if diffs:
            differing.append(f"- `{str(a['id'])[:8]}` {_clean(a['label'])} vs baseline `{base[:8]}`: "
                             f"{_clean(format_differences(diffs))}")
    if differing:
        return ["**Load-path settings that differ from the baseline** (`workbench ledger show ID` lists "
                "them all):", "", *differing]
    if compared:
        extra = f"; {unrecorded} recorded before settings were" if unrecorded else ""
        return [f"_Every attempt ran under its baseline's load-path settings ({compared} compared{extra})._"]
    return []


def _clean(text: Any) -> str:
    """A ledger string inside a Markdown line: no line breaks, no table pipes, no stray backticks."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("`", "'")
