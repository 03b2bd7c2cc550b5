"""Whether a fast path actually engaged: one ON / PARTIAL / INERT rule for every layer that reports one."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Engaged:
    """What a fast path actually did: ``zero_copy: 92/92 tensors`` (ON), ``0/92`` (INERT)."""

    feature: str
    done: int
    total: int
    unit: str = "tensors"
    note: str = ""

    @property
    def state(self) -> str:
        if self.total == 0 or self.done == 0:
            return "INERT"
        return "ON" if self.done == self.total else "PARTIAL"

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.feature}: {self.done}/{self.total} {self.unit} — {self.state}{note}"

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "state": self.state, "text": str(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Engaged:
        """The fact back from :meth:`to_json` (``state`` and ``text`` are derived, so not read)."""
        return cls(str(data["feature"]), int(data["done"]), int(data["total"]), str(data.get("unit", "tensors")),
                   str(data.get("note", "")))
