"""Whether a baseline measured the same thing as the attempt held against it: the same model (its
identity: the hash over its bytes, else its size), the same cache state and the same device (of the
same machine).

A ratio against a baseline of another model, cache state or device compares two different things, so
the runner refuses such a baseline unless asked (``--baseline-across``), and every surface that shows
such a ratio says what differs (:func:`across_caveat`). Both sides are ledger attempt rows (or the same
keys for a measurement not recorded yet): ``file_hash``, ``file_size``, ``file_path``, ``cache``,
``device``, ``host``. Rows recorded before this check was made are judged the same way when read back.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from workbench.records.model_names import model_display_name

ACROSS_FLAG = "--baseline-across"
FACTS = ("file_hash", "file_size", "file_path", "cache", "device", "host")  # an attempt's row: what is compared


def baseline_differences(ours: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """What the baseline ``base`` measured differently from ``ours``, one phrase each (``another model
    (all-MiniLM-L6-v2, 86.65 MiB)``, ``warm, not cold``, ``on cuda:0, not host``); [] when nothing
    known differs (a fact one side lacks is not a difference)."""
    out = []
    model = _model_difference(ours, base)
    if model:
        out.append(model)
    ours_state, base_state = cache_state(ours.get("cache")), cache_state(base.get("cache"))
    if ours_state and base_state and ours_state != base_state:
        out.append(f"{base_state}, not {ours_state}")
    ours_dev, base_dev = _device(ours.get("device")), _device(base.get("device"))
    if ours_dev and base_dev and ours_dev != base_dev:
        out.append(f"on {base_dev}, not {ours_dev}")
    if ours.get("host") and base.get("host") and ours["host"] != base["host"]:  # one name, another machine's device
        out.append(f"measured on {base['host']}, not {ours['host']}")
    return out


def describe_across(baseline_id: str, differences: list[str]) -> str:
    """``baseline 5e3891bd is another model (…) and warm, not cold`` ('' for no difference)."""
    if not differences:
        return ""
    listed = differences[0] if len(differences) == 1 else f"{', '.join(differences[:-1])} and {differences[-1]}"
    return f"baseline {str(baseline_id)[:8]} is {listed}"


def across_caveat(row: Mapping[str, Any]) -> str:
    """What a ratio shown for ``row`` (a ledger attempt read with its baseline's facts, ``baseline_*``)
    must say beside it: ``ACROSS: baseline 5e3891bd is …`` ('' when the baseline measured the same)."""
    found = row.get("baseline_across")
    return f"ACROSS: {found}" if found else ""


def with_across(effect: str, row: Mapping[str, Any], clean: Callable[[str], str] = str) -> str:
    """A ratio's cell (``0.52× [0.41–0.68]``) with :func:`across_caveat` beside it when there is one,
    passed through ``clean`` (the renderer's escaping: the names in it come from a ledger)."""
    caveat = across_caveat(row)
    return f"{effect} {clean(caveat)}" if caveat and effect not in ("", "—", "baseline") else effect


def row_across(row: Mapping[str, Any]) -> str:
    """:func:`describe_across` for a ledger row carrying its baseline's columns as ``baseline_<key>``."""
    if not row.get("baseline_id") or row.get("auto_verdict") == "baseline":
        return ""
    base = {key: row.get(f"baseline_{key}") for key in FACTS}
    if not any(base.values()):  # the baseline is not in this ledger: nothing to compare
        return ""
    return describe_across(row["baseline_id"], baseline_differences(row, base))


def cache_state(label: Any) -> str:
    """The state a cache label asked for: ``cold``, ``warm``, ``asis``; an unreached state's label
    (``asis(unreachable: cold, 2/5 runs; …)``) asked for ``cold`` and says so on its own, so two attempts
    that asked for one state are one state however many of their runs reached it."""
    text = str(label or "")
    if text.startswith("asis(unreachable:"):
        return text.split(":", 1)[1].split(",", 1)[0].strip()
    return text.split("(", 1)[0].strip()


def _device(device: Any) -> str:
    """``cuda`` and ``cuda:0`` are one device; ``host`` stays ``host``."""
    text = str(device or "").strip()
    if not text:
        return ""
    name, sep, number = text.partition(":")
    return f"{name}:{number or 0}" if name in ("cuda", "hip") else text


def _model_difference(ours: Mapping[str, Any], base: Mapping[str, Any]) -> str:
    h_ours, h_base = ours.get("file_hash"), base.get("file_hash")
    s_ours, s_base = ours.get("file_size"), base.get("file_size")
    if h_ours and h_base:
        if h_ours == h_base:
            return ""
    elif not (s_ours and s_base and s_ours != s_base):  # no hash to compare: a byte count that differs tells
        return ""
    name_ours, name_base = _name(ours), _name(base)
    if name_ours == name_base:  # one name for two models: the hash tells them apart
        name_ours += _hash_tag(h_ours)
        name_base += _hash_tag(h_base)
    return f"another model ({name_base}, {_mib(s_base)}; this is {name_ours}, {_mib(s_ours)})"


def _name(row: Mapping[str, Any]) -> str:
    path = row.get("file_path")
    return model_display_name(str(path)) if path else "?"


def _hash_tag(digest: Any) -> str:
    return f" #{str(digest).rpartition(':')[2][:8]}" if digest else ""


def _mib(size: Any) -> str:
    try:
        return f"{int(size) / (1 << 20):.2f} MiB"
    except (TypeError, ValueError):
        return "size unknown"
