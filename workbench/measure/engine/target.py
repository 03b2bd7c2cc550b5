"""What an external engine is said to load: the model's data files, each known by (st_dev, st_ino).

Evidence of a read is counted only on these inodes (:mod:`~workbench.measure.engine.evidence`), so a
file is recognised whatever path reaches it (a link, a bind mount, ``/proc/PID/fd/N``) and another file
of the same name or size never is.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

FileKey = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True)
class ReadTarget:
    """The model's data files (``paths``, their ``sizes`` and ``keys``) and its tensor bytes ``nbytes``."""

    name: str
    paths: tuple[str, ...]
    nbytes: int
    sizes: tuple[int, ...] = ()
    keys: tuple[FileKey | None, ...] = ()  # None: the file could not be stat'ed

    @classmethod
    def of(cls, path: str, nbytes: int | None = None) -> ReadTarget:
        """The model at ``path`` (a file, or a set's directory, index file or shard: every data file of
        it; a file the workbench cannot index: that file). ``nbytes`` defaults to its tensor bytes."""
        from workbench.io.modelcache import model_files

        files = model_files(path, any_file=True)
        paths = tuple(os.path.realpath(p) for p in files.paths[:files.n_data_files])
        if nbytes is None:
            nbytes = files.index.nbytes if files.index is not None else files.data_bytes
        return cls.from_paths(os.path.basename(os.fspath(path).rstrip("/")) or os.fspath(path), paths, nbytes)

    @classmethod
    def from_paths(cls, name: str, paths: tuple[str, ...], nbytes: int) -> ReadTarget:
        """These files, stat'ed now (a file that cannot be stat'ed has no key: nothing counts on it)."""
        sizes, keys = [], []
        for p in paths:
            try:
                st = os.stat(p)
            except OSError:
                sizes.append(0)
                keys.append(None)
                continue
            sizes.append(st.st_size)
            keys.append((st.st_dev, st.st_ino))
        return cls(name, paths, nbytes, tuple(sizes), tuple(keys))

    def file_of(self, key: FileKey | None, path: str = "") -> int | None:
        """Which of the model's files ``key`` (or, failing that, the real ``path``) is; None: none of them."""
        if key is not None and key in self.keys:
            return self.keys.index(key)
        if path and path in self.paths:  # an overlay's mapping names the file, not the overlay's inode
            return self.paths.index(path)
        return None

    def resident(self) -> tuple[int, ...] | None:
        """Bytes of each file in the page cache now (None when mincore cannot tell)."""
        from workbench.errors import WorkbenchError
        from workbench.io.pagecache import page_size, resident_pages

        try:
            return tuple(resident_pages(p)[0] * page_size() for p in self.paths)
        except (OSError, WorkbenchError):
            return None

    def resident_bytes(self) -> int | None:
        """Bytes of the whole model in the page cache now (None when mincore cannot tell)."""
        each = self.resident()
        return None if each is None else sum(each)


__all__ = ["FileKey", "ReadTarget"]
