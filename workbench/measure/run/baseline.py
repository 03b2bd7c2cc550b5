"""A ledger ``--baseline`` checked against the measurement held to it, before anything is recorded.

A ratio against a baseline of another model (identity), cache state or device compares two different
things: such a baseline is refused in one line naming what differs (:class:`BaselineMismatch`, exit 2),
unless the caller asks for it (``across=True``, ``--baseline-across``); then what differs is returned,
and every attempt held to it carries it (``AttemptResult.baseline_across``, its notes, the ledger's
``baseline_across`` column) so each surface showing the ratio says ACROSS beside it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from workbench.errors import BaselineMismatch
from workbench.records.baseline_match import ACROSS_FLAG, baseline_differences, describe_across

if TYPE_CHECKING:
    from workbench.ledger import Ledger
    from workbench.measure.run.model import Models
    from workbench.records import RunConfig


def check_baseline(ledger: Ledger, baseline: str, configs: Sequence[RunConfig], caches: Sequence[str],
                   models: Models, *, across: bool = False) -> str:
    """What the baseline measured differently from every config in every cache state of this
    measurement ('' when nothing); refused unless ``across``. ``baseline`` is a full id or a prefix."""
    from workbench.settings.defaults import host_id

    base = ledger.attempt(baseline)
    found: list[str] = []
    for config in configs:
        identity = models.identity(config.file)
        for cache in caches:
            ours = {"file_hash": identity.get("hash"), "file_size": identity.get("size"),
                    "file_path": identity.get("path", config.file), "cache": cache, "device": config.device,
                    "host": host_id()}
            for difference in baseline_differences(ours, base):
                if difference not in found:
                    found.append(difference)
    what = describe_across(base["id"], found)
    if what and not across:
        raise BaselineMismatch(what, ACROSS_FLAG)
    return what

