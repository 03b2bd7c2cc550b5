"""What an :class:`~workbench.expert.cache.ExpertCache` can be asked for, and the check of what it is given
(one :class:`~workbench.errors.ParamError` naming the option, before anything is reserved)."""
from __future__ import annotations

from typing import Sequence

from workbench.errors import ParamError
from workbench.expert.layout import PLACEMENTS
from workbench.expert.readers import READERS
from workbench.formats.index import ExpertBlob

BOUNDARY_RELEASE = ("on", "off")
GATE_SCOPES = ("blob", "file")
DEFAULT_READER = {"inplace": "direct-inplace", "bounce": "direct-bounce", "aligned": "pread", "pool": "pread"}
CACHE_PLACEMENTS = (*PLACEMENTS, "pool")  # pool: not a layout of a blob's reservation (workbench.expert.pool)


def _check_args(blobs: Sequence[ExpertBlob], budget: int, placement: str, release: str, reader: str,
                gate: float | None, gate_scope: str) -> None:
    if not blobs:
        raise ParamError("cache", "blobs", "no expert blobs: the model is not a MoE")
    for name, value, known in (("placement", placement, CACHE_PLACEMENTS), ("boundary_release", release, BOUNDARY_RELEASE),
                               ("reader", reader, ("auto", *READERS)), ("gate_scope", gate_scope, GATE_SCOPES)):
        if value not in known:
            raise ParamError("cache", name, f"{value!r} is not one of {', '.join(known)}")
    if gate is not None and not 0.0 <= gate <= 1.0:
        raise ParamError("cache", "gate", f"must be a resident fraction in [0, 1], got {gate!r}")
    empty = next((b for b in blobs if any(n <= 0 for _, n in b.slices)), None)
    if empty is not None:
        raise ParamError("cache", "blobs", f"layer {empty.layer} {empty.name} has an empty expert slice")
    largest = max(n for b in blobs for _, n in b.slices)
    if budget < largest:
        raise ParamError("cache", "budget", f"{budget} B cannot hold one expert slice ({largest} B)")


def check_pool(placement: str, reader: str, release: str, scope: str, advice: str = "dontneed") -> None:
    """One ParamError line for what a pool cannot do: read in place (no frame carries the file's remainder)
    or hand pages back (none ever is)."""
    if placement != "pool":
        return
    if reader == "direct-inplace":
        raise ParamError(scope, "reader", "direct-inplace needs a slot placed at the file's remainder; a pool's "
                                          "frames start on a page: use pread, pread-random or direct-bounce")
    if release != "on" or advice != "dontneed":
        raise ParamError(scope, "placement", "a pool never hands pages back: leave --boundary-release and "
                                             "--release-advice at their defaults")


def gated_reader(kind: str, gate: float | None, scope: str, file_resident: bool | None, file: str,
                 span: tuple[int, int]) -> str:
    """The reader kind a miss in ``span`` of ``file`` is read with: the file's ``kind``, or ``"pread"`` where
    the gate finds the page cache holding at least ``gate`` of its blob (``scope`` ``"blob"``, measured
    now) or of the whole model (``"file"``: ``file_resident``, measured when the cache opened)."""
    if gate is None:
        return kind
    if scope == "file":
        resident = bool(file_resident)
    else:
        from workbench.io.pagecache import resident_fraction

        first, end = span
        resident = resident_fraction(file, first, end - first) >= gate
    return "pread" if resident else kind


def files_resident(files: Sequence[str]) -> float:
    """The whole model's resident fraction, by pages, over every file."""
    from workbench.io.pagecache import resident_pages

    counts = [resident_pages(f) for f in files]
    return sum(r for r, _ in counts) / max(1, sum(t for _, t in counts))
