"""Byte-exact verification: read back what landed on the device and compare it with the file's bytes
(each tensor with its own file's, for a model of several files).

The file side is one xxh3_64 per tensor, taken in the same untouched pass as the whole file's hash
(:func:`workbench.io.identity.hash_with_ranges`) and cached under that hash: a checksum is only ever
kept beside the hash of the very bytes it was taken from. The hash it must match is the one the attempt
recorded for the file (``expected``; the runner hands it to each worker), else the file's identity now:
bytes that hash to anything else are not vouched for ("verified" is never 1 against a stale identity).
Reading is untouched (:func:`workbench.io.untouched.iter_untouched`), so verifying never warms a file
the next run expects cold nor evicts one it expects warm.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import xxhash

from workbench.errors import VerificationError
from workbench.formats.drift import changed_since_indexed
from workbench.formats.index import TensorIndex, TensorInfo
from workbench.records import VerifySummary
from workbench.strategies.base import Placement
from workbench.upload.base import Device

CACHE_KIND = "tensor-xxh3_64"


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of comparing every tensor: ``ok`` only when all ``total`` tensors matched."""

    ok: bool
    checked: int
    total: int
    mismatches: int
    first_mismatch: str | None = None  # tensor name
    detail: str = ""

    def to_json(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "total": self.total, "mismatches": self.mismatches,
                "first_mismatch": self.first_mismatch, "detail": self.detail}

    def summary(self) -> VerifySummary:
        """What a worker reports across its process boundary, why it failed included."""
        return VerifySummary(self.ok, self.checked, self.total, self.mismatches, self.first_mismatch,
                             self.detail)

    def raise_for_mismatch(self, path: str) -> None:
        """Raise VerificationError naming the first mismatching tensor, if any."""
        if not self.ok:
            raise VerificationError(path, self.first_mismatch or "?", self.detail)


def _ranges_key(tensors: Sequence[TensorInfo]) -> str:
    h = xxhash.xxh3_64()
    for t in tensors:
        h.update(f"{t.name}\0{t.offset}\0{t.nbytes}\0{t.file.rsplit('/', 1)[-1]}\n".encode())
    return h.hexdigest()


def identity_hashes(index: TensorIndex) -> dict[str, str]:
    """Each file's hash by its real path, as :func:`workbench.io.identity.model_identity` has it now."""
    from workbench.io.identity import model_identity

    ident = model_identity(index)
    return {os.path.realpath(m.read_path or m.path): m.hash for m in (ident.files or (ident,))}


def reference_checksums(index: TensorIndex, expected: Mapping[str, str] | None = None) -> dict[str, str]:
    """Per-tensor xxh3_64 hex of the model's bytes, each tensor read from its own file.

    ``expected`` maps each file's real path to the hash its bytes must have (the attempt's identity;
    None: :func:`identity_hashes` now). A file's checksums come from one pass with its whole hash and are
    cached under it (with its tensor ranges); bytes that hash otherwise raise VerificationError.
    """
    from workbench.io.identity import cached_json, hash_with_ranges

    hashes = identity_hashes(index) if expected is None else expected
    out: dict[str, str] = {}
    for f, tensors in index.by_file():
        if not tensors:
            continue
        real = os.path.realpath(f.path)
        want = hashes.get(real)
        if not want:
            raise VerificationError(f.path, tensors[0].name, "no identity was recorded for this file")

        def compute(real: str = real, want: str = want, ranges=[(t.offset, t.nbytes) for t in tensors]) -> list[str]:
            got, sums = hash_with_ranges(real, ranges)
            if got != want:  # nothing is cached: the key would name bytes these sums are not of
                raise VerificationError(real, tensors[0].name, f"the file's bytes hash to {got[:25]}…, not "
                                        f"{want[:25]}… as its identity for this attempt says")
            return sums

        sums = cached_json(CACHE_KIND, [want, _ranges_key(tensors)], compute)
        out.update({t.name: s for t, s in zip(tensors, sums)})
    return out


CHUNK = 64 << 20  # verification streams through one pinned buffer of this size


def _check_one(device: Device, p: Placement | None, nbytes: int, want: str, staging: memoryview) -> str:
    """'' when the placement holds the right bytes, else what is wrong."""
    if p is None:
        return "no placement: the tensor never reached the device"
    if p.nbytes != nbytes:
        return f"placement holds {p.nbytes} B, the tensor has {nbytes} B"
    if p.buffer.freed:
        return "device buffer already freed"
    if p.offset < 0 or p.offset + nbytes > p.buffer.nbytes:  # a group buffer holds several tensors
        return f"placement at {p.offset} overruns its {p.buffer.nbytes} B device buffer"
    # Streamed xxh3 equals the one-shot digest; chunks keep host memory flat and, from pinned
    # staging, the device→host copy runs at DMA speed instead of through a fresh pageable buffer.
    hasher = xxhash.xxh3_64()
    for start in range(0, nbytes, len(staging)):
        view = staging[: min(len(staging), nbytes - start)]
        device.read_back_into(p.buffer, p.offset + start, view)
        hasher.update(view)
        view.release()  # a live slice would pin the staging buffer past free_pinned
    got = hasher.hexdigest()
    return "" if got == want else f"xxh3_64 {got} on the device, {want} in the file"


def verify_placements(index: TensorIndex, device: Device, placements: Iterable[Placement],
                      expected: Mapping[str, str] | None = None) -> VerifyReport:
    """Read back every placement and compare with the file; never raises for a mismatch, reports it.
    ``expected``: each file's hash by real path, as the attempt recorded it (:func:`reference_checksums`)."""
    total = len(index.tensors)
    changed = changed_since_indexed(index)
    if changed:  # the file's bytes now are not the ones the index (and the load) described
        return VerifyReport(ok=False, checked=0, total=total, mismatches=0,
                            detail=f"file changed since it was indexed ({changed}): cannot vouch for the load")
    by_name = {p.tensor: p for p in placements}
    try:
        want = reference_checksums(index, expected)
    except VerificationError as exc:  # the bytes are not the attempt's: nothing is compared with them
        return VerifyReport(ok=False, checked=0, total=total, mismatches=0, detail=exc.detail)
    bad, checked, first, detail = 0, 0, None, ""
    staging = device.alloc_pinned(max(1, min(CHUNK, max((t.nbytes for t in index.tensors), default=1))))
    try:
        for t in index.tensors:
            checked += t.name in by_name
            problem = _check_one(device, by_name.get(t.name), t.nbytes, want[t.name], staging.view)
            if problem:
                bad += 1
                if first is None:
                    first, detail = t.name, problem
    finally:
        device.free_pinned(staging)
    return VerifyReport(ok=bad == 0, checked=checked, total=total, mismatches=bad,
                        first_mismatch=first, detail=detail)
