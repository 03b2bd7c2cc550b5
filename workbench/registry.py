"""Name → "module:Class" registries, imported on first use.

One registry per kind (strategies, devices, formats). Registering costs a string; the module behind a
name is imported only when that name is asked for, so ``import workbench`` never pulls in cuda-python,
hip-python or a peer loader.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

from workbench.errors import UnknownName

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered implementation: where it lives and how to install what it needs."""

    name: str
    target: str  # "package.module:Class"
    hint: str = ""
    kind: str = ""  # what sort of thing within the registry (strategies: "peer" for references)


@dataclass(frozen=True)
class Availability:
    """Whether something can run here, and if not, why (one line)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class Registry(Generic[T]):
    """A read-only-from-outside map of names to lazily imported classes."""

    def __init__(self, kind: str, entries: Mapping[str, tuple[str, ...]] | None = None,
                 extra: Callable[[], Mapping[str, str]] | None = None):
        """``extra`` (called on every lookup) names more entries, ``name`` → ``"module:Class"``, beside
        the registered ones: registered elsewhere than in this file (an environment variable), so a
        worker process sees the same ones."""
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._extra = extra
        for name, spec in (entries or {}).items():  # (target, hint) or (target, hint, kind)
            self.register(name, *spec)

    def register(self, name: str, target: str, hint: str = "", kind: str = "", *, replace: bool = False) -> None:
        """Add ``name`` → ``"module:Class"``; refuses to shadow an existing name unless ``replace``."""
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} '{name}' is already registered")
        if ":" not in target:
            raise ValueError(f"{self.kind} '{name}': target must be 'module:Class', got {target!r}")
        self._entries[name] = Entry(name, target, hint, kind)

    def _current(self) -> dict[str, Entry]:
        extra = self._extra() if self._extra is not None else {}
        if not extra:
            return self._entries
        return {**self._entries, **{name: Entry(name, target) for name, target in extra.items()}}

    @property
    def registered(self) -> Mapping[str, Entry]:
        """The entries registered in code (without ``extra``'s)."""
        return MappingProxyType(self._entries)

    @property
    def entries(self) -> Mapping[str, Entry]:
        return MappingProxyType(self._current())

    def names(self) -> list[str]:
        return list(self._current())

    def __contains__(self, name: object) -> bool:
        return name in self._current()

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def get(self, name: str) -> type[T]:
        """Import and return the class registered as ``name``."""
        entry = self._current().get(name)
        if entry is None:
            raise UnknownName(self.kind, name, self.names())
        module_name, _, attr = entry.target.partition(":")
        module = importlib.import_module(module_name)
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
