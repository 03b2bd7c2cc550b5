"""What a staging ring says about itself in a load's engaged facts (upload/staging.py)."""
from __future__ import annotations

from typing import Any


def describe_ring(ring: Any) -> str:
    """``20 x 4 MiB registered (mmap + huge pages), 12.3 ms to provision, 1.1 ms to release``;
    background: ``20 x 8 MiB registered (mmap + huge pages) one by one in the background (first slot
    after 1.9 ms, all after 36.0 ms), 0.1 ms to provision, 2.0 ms to release``."""
    source = {"registered": "registered (mmap + huge pages)", "pinned": "alloc_pinned",
              "write-combined": "alloc_pinned write-combined",
              "unlocked": "NOT page-locked", "pending": "mmap + huge pages, NOT yet registered",
              "none": "nothing provisioned"}[ring.how]
    if ring.provision in ("readers", "first-read"):
        made = f"{len(ring.slots)}" if len(ring.slots) == ring.wanted else f"{len(ring.slots)} of {ring.wanted}"
        by = ring.registered_by  # a copier registers the slots its readers filled
        mapped = ("each carved by the reader that first took it from one mapping made with the ring "
                  f"({ring.provision_s * 1e3:.1f} ms, every slot's fence with it)" if ring.slab is not None else
                  "each mapped by the reader that first took it")
        how = ("each made by the reader that first took it" if not ring.deferred_made else
               f"{mapped}, faulted in by its first read, then registered" + (f" by {by}" if by else ""))
        where = f"in readers and {by}" if by and ring.deferred_made else "in readers"
        return (f"{made} x {ring.slot_bytes / 2**20:g} MiB {source}, {how} "
                f"({ring.reader_provision_s * 1e3:.1f} ms {where}, first slot after "
                f"{(ring.first_slot_s or 0) * 1e3:.1f} ms), {ring.release_s * 1e3:.1f} ms to release")
    if ring.provision == "upfront":
        return (f"{len(ring.slots)} x {ring.slot_bytes / 2**20:g} MiB {source}, "
                f"{ring.provision_s * 1e3:.1f} ms to provision, {ring.release_s * 1e3:.1f} ms to release")
    count = f"{len(ring.slots)}" if len(ring.slots) == ring.wanted else f"{len(ring.slots)} of {ring.wanted}"
    first = "never" if ring.first_slot_s is None else f"after {ring.first_slot_s * 1e3:.1f} ms"
    every = (f"all after {ring.provisioned_s * 1e3:.1f} ms" if ring.provisioned_s is not None else
             f"failed: {_one_line(ring.error)}" if ring.error is not None else "stopped at close")
    return (f"{count} x {ring.slot_bytes / 2**20:g} MiB {source} one by one in the background "
            f"(first slot {first}, {every}), {ring.provision_s * 1e3:.1f} ms to provision, "
            f"{ring.release_s * 1e3:.1f} ms to release")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120] if text else ''}"
