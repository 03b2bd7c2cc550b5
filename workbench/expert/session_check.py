"""Checks that a session landed the file's bytes: uploads read back from the device, cache entries read
from their slots, each compared with the same bytes read from the model file.

The file's bytes are read with O_DIRECT where the file system allows it, so a check does not warm the
page cache a cold session is measuring; elsewhere with buffered reads. A difference raises
:class:`~workbench.errors.VerificationError` naming the tensor and the expert.
"""
from __future__ import annotations

from typing import Sequence

from workbench.errors import VerificationError
from workbench.expert.cache import ExpertCache, SliceKey
from workbench.expert.readers import SliceReader, make_reader, resolve_reader
from workbench.formats.index import TensorIndex
from workbench.upload.base import Device, DeviceBuffer


class SessionChecker:
    """Compares what a session landed (device) and holds (cache) with the model's files."""

    def __init__(self, index: TensorIndex, device: Device, cache: ExpertCache, arena: DeviceBuffer):
        self.index, self.device, self.cache, self.arena = index, device, cache, arena
        self.verified = 0
        self._readers: dict[str, SliceReader] = {}

    def _file_bytes(self, key: SliceKey) -> bytes:
        file = self.cache.file_of(key)
        reader = self._readers.get(file)
        if reader is None:
            reader = self._readers[file] = make_reader(resolve_reader("direct-bounce", file)[0], file)
        offset, nbytes = self.cache.layouts[key.blob].slice(key.expert)
        out = bytearray(nbytes)
        reader.read_into(memoryview(out), 0, offset, nbytes)
        return bytes(out)

    def check_upload(self, key: SliceKey, at: int, nbytes: int) -> None:
        """The device's bytes at ``at`` of the arena against the file's (synchronizes the device)."""
        self.device.synchronize()
        if self.device.read_back(self.arena, at, nbytes) != self._file_bytes(key):
            self._fail(key, f"{nbytes} B uploaded through the {self.cache.facts.placement} cache")
        self.verified += 1

    def check_landed(self, landed: Sequence[tuple[SliceKey, int, int]], arena: DeviceBuffer) -> None:
        """Every slice of the last layer landed (after a turn, outside its timing)."""
        for key, at, nbytes in landed:
            self.check_upload(key, at, nbytes)

    def check_cache(self) -> None:
        """Every live cache entry's slot against the file."""
        for key in self.cache.live_keys():
            view = self.cache.view(key)
            try:
                same = bytes(view) == self._file_bytes(key)
            finally:
                view.release()
            if not same:
                self._fail(key, f"the {self.cache.facts.placement} cache's slot")
            self.verified += 1

    def _fail(self, key: SliceKey, what: str) -> None:
        blob = self.cache.blobs[key.blob]
        raise VerificationError(self.cache.file_of(key), f"{blob.tensors[0]} expert {key.expert}", f"{what} differ")

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def __enter__(self) -> "SessionChecker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
