"""Where data lives and which machine this is: the data root, the ledger, the host id, the lock and
cache directories, each a getter and its ``set_*`` context manager. A part of :mod:`workbench.settings.defaults`,
which re-exports every name here: import them from there (its docstring lists every variable)."""
from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from workbench.settings.env import _env, _setenv

DATA = "WORKBENCH_DATA"
LEDGER = "WORKBENCH_LEDGER"
HOST = "WORKBENCH_HOST"
LOCK_DIR = "WORKBENCH_LOCK_DIR"
CACHE_DIR = "WORKBENCH_CACHE_DIR"

DEFAULT_LOCK_DIR = "/tmp/workbench-locks"


# -- where data lives ------------------------------------------------------------------------------


def data_root() -> Path:
    """``$WORKBENCH_DATA``, else the ``data/`` of the workbench checkout the cwd is in (so a notebook
    in ``notebooks/`` and the CLI at the repository root share one), else ``./data``."""
    named = _env(DATA)
    if named:
        return Path(named).expanduser()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "workbench").is_dir():
            return Path("data") if folder == here else folder / "data"
    return Path("data")


def ledger_path(root: str | os.PathLike[str] | None = None) -> Path:
    """``$WORKBENCH_LEDGER``, else ``ledger.sqlite`` in ``root`` (default :func:`data_root`)."""
    named = _env(LEDGER)
    if named:
        return Path(named).expanduser()
    return Path(root if root is not None else data_root()) / "ledger.sqlite"


def models_dir() -> Path:
    """Where synthetic models go by default: ``<data root>/models``."""
    return data_root() / "models"


def runs_dir() -> Path:
    """Where sweeps write their executed notebooks: ``<data root>/runs``."""
    return data_root() / "runs"


def reports_dir() -> Path:
    """Where campaign reports go: ``<data root>/reports``."""
    return data_root() / "reports"


@contextmanager
def set_data_root(path: str | os.PathLike[str] | None) -> Iterator[None]:
    with _setenv(DATA, None if path is None else str(path)):
        yield


@contextmanager
def set_ledger_path(path: str | os.PathLike[str] | None) -> Iterator[None]:
    with _setenv(LEDGER, None if path is None else str(path)):
        yield


# -- this machine ----------------------------------------------------------------------------------


def host_id() -> str:
    """This machine's name in the ledger: ``$WORKBENCH_HOST`` (name your test rigs), else the hostname
    plus the first 8 hex digits of /etc/machine-id — VMs and containers often share a hostname ("vm",
    "localhost"), and ceilings and merged ledgers must not mix two machines under one name."""
    return _env(HOST) or machine_host_id()


def machine_host_id() -> str:
    """This machine's own name, whatever ``$WORKBENCH_HOST`` says: the hostname plus the first 8 hex
    digits of /etc/machine-id (what :func:`host_id` is when the variable is unset)."""
    try:
        with open("/etc/machine-id", encoding="ascii") as f:
            machine = f.read().strip()[:8]
    except OSError:
        machine = ""
    return f"{socket.gethostname()}-{machine}" if machine else socket.gethostname()


@contextmanager
def set_host(name: str | None) -> Iterator[None]:
    with _setenv(HOST, name):
        yield


def lock_dir() -> Path:
    """Where the per-device lock files live: ``$WORKBENCH_LOCK_DIR``, else /tmp/workbench-locks."""
    return Path(_env(LOCK_DIR) or DEFAULT_LOCK_DIR)


@contextmanager
def set_lock_dir(path: str | os.PathLike[str] | None) -> Iterator[None]:
    with _setenv(LOCK_DIR, None if path is None else str(path)):
        yield


def cache_dir() -> Path:
    """File identities and reference checksums: ``$WORKBENCH_CACHE_DIR``, else ~/.cache/workbench."""
    return Path(_env(CACHE_DIR) or Path.home() / ".cache" / "workbench")


@contextmanager
def set_cache_dir(path: str | os.PathLike[str] | None) -> Iterator[None]:
    with _setenv(CACHE_DIR, None if path is None else str(path)):
        yield
