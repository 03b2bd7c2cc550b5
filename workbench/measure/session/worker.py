"""``python -m workbench.measure.session.worker [CONFIG.json]`` — one long expert session in its own process.

The config (a path argument, or stdin) is ``{"file", "device", "session": {SessionConfig fields},
"cgroup": {"path", "version"} or {}, "pin": {"budget_bytes"} or {}}``; with a cgroup the worker joins
it before anything else, so all it allocates and reads in is charged there, and reads its
``memory.stat`` every turn. With ``pin`` (a balloon holds the limit) it locks its own resident file
pages after turn 0 (:func:`workbench.io.own_pages.pin_own_file_pages`, at most ``budget_bytes``: the
room the balloon left for them), outside every turn's timing, and reports what it locked.
stdout carries one JSON object per line, flushed as it happens, so the parent records every turn the
moment it ends (a session that dies at turn 17 keeps 16 turns):

* ``{"event": "start", "pid", "device_info", "facts": SessionFacts}`` once the cache and device are up;
* ``{"event": "turn", "turn": TurnRecord.to_json()}`` after every turn;
* ``{"event": "pinned", "pin": PinReport.to_json()}`` after turn 0, with ``pin``;
* ``{"event": "end", "verified_slices": n}`` when all turns are done (and, with ``verify_end``, the
  cache checked against the file).

Why a process of its own: the memory and faults a turn records (``actual_anon_bytes``, ``minflt``)
are the whole process's, so they must describe the session alone — not the command line's click,
pandas and SQLite — and the parent, like the runner's, never opens the device it measures. Anything
a strategy prints goes to stderr; a :class:`WorkbenchError` is one line on stderr and exit 2.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import IO, Any, Mapping

from workbench.errors import WorkbenchError


def emit(out: IO[str], event: str, **fields: Any) -> None:
    out.write(json.dumps({"event": event, **fields}) + "\n")
    out.flush()


def run_session_process(config: Mapping[str, Any], out: IO[str]) -> None:
    """Open the index and the device, run every turn, and emit the events as they happen."""
    from workbench.expert.procstat import CgroupProbe
    from workbench.expert.session import ExpertSession, SessionConfig
    from workbench.formats import open_index
    from workbench.upload import open_device

    index = open_index(config["file"])
    session_config = SessionConfig(**dict(config.get("session") or {}))
    cgroup = config.get("cgroup") or {}
    probe = CgroupProbe(cgroup["path"], int(cgroup["version"])).read if cgroup.get("path") else None
    with open_device(config.get("device") or "host") as device:
        info = device.info().to_json()
        with ExpertSession(index, device, session_config, memory_probe=probe) as session:
            emit(out, "start", pid=os.getpid(), device_info=info, facts=session.facts.to_json())
            pin = config.get("pin") or {}
            for record in session.turns():
                emit(out, "turn", turn=record.to_json())
                if pin and record.turn == 0:  # between turns: the next one's clock has not started
                    emit(out, "pinned", pin=_pin(index, pin).to_json())
            session.finish_checks()
            emit(out, "end", verified_slices=session.verified_slices)


def _pin(index: Any, pin: Mapping[str, Any]) -> Any:
    """Under a balloon: what a cgroup would have protected, the worker's own file pages, locked (see
    :mod:`workbench.io.own_pages`; never the model's files). Under a cgroup nothing is pinned: the
    libraries' pages are charged to the runner that cached them, so the session's limit never takes them."""
    from workbench.io.own_pages import pin_own_file_pages

    budget = pin.get("budget_bytes")
    return pin_own_file_pages([f.path for f in index.files], None if budget is None else int(budget))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 WorkbenchError, 1 anything else)."""
    out = sys.stdout
    args = sys.argv[1:] if argv is None else argv
    source = args[0] if args else "-"
    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkbenchError(f"session config {source}: not JSON: {exc}") from None
        if "file" not in config:
            raise WorkbenchError(f"session config {source}: missing file")
        if (config.get("cgroup") or {}).get("path"):
            from workbench.measure.session.pressure import join_cgroup

            join_cgroup(config["cgroup"]["path"])  # first: what follows is charged to the limit
        with contextlib.redirect_stdout(sys.stderr):  # nothing but events on stdout
            run_session_process(config, out)
    except WorkbenchError as exc:
        print(f"workbench.measure.session.worker: error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - a bug: keep the traceback for the parent's error
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
