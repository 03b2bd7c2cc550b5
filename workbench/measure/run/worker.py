"""``python -m workbench.measure.run.worker [CONFIG.json]`` — one load in a fresh process, one JSON object out.

Module imports are start-up, not load (a compiled engine has its parser linked in): the format readers
and the libraries they import lazily are imported before the window, and any module that is still
imported inside it is listed under ``timings.window_imports``.

The config (a file path argument, or stdin) is ``{"file", "strategy", "params", "device", "verify"}``
plus, from the runner, ``files`` (the model's member files, for the page-cache footprint and the block
device's counters: ``measure/run/costs.py``), ``identity`` (each file's hash as the attempt recorded it,
by real path: verification vouches only for those bytes, ``measure/run/verify.py``), ``cache`` (the state the runner set, which the worker
holds once more just before its window: ``io/cache_recheck.py``) and ``spawn_monotonic`` (the
parent's ``time.monotonic()`` just before the spawn, so the interpreter start-up can be measured on
the same clock). Order of work:

1. open the device and run the strategy's ``prepare`` hook (device init: outside the load window), then
   re-check the cache state the runner set (outside the window too);
2. the LOAD WINDOW: ``open_index`` (phase ``index``) + ``strategy.load``;
3. after the window: read the device bytes back and compare them with the file (``verify``).

stdout carries exactly one JSON object; anything a strategy prints goes to stderr instead. A
:class:`WorkbenchError` is one line on stderr and exit 2; anything else keeps its traceback, exit 1.
A crash (SIGSEGV, SIGABRT, SIGBUS …) prints every thread's Python stack to stderr (faulthandler), and
SIGUSR1 prints them without stopping: the runner sends it to a worker past its timeout before killing
it, so the run's stderr tail says where the worker hung.
"""
from __future__ import annotations

import time

_T_ENTRY = time.monotonic()  # before the workbench imports, to separate interpreter from import time

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from typing import Any, Callable, Mapping  # noqa: E402

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.records import Timings, VerifySummary, WorkerReport  # noqa: E402


def read_config(argv: list[str]) -> dict[str, Any]:
    """The JSON config from ``argv[0]`` (a path; ``-`` or nothing means stdin)."""
    source = argv[0] if argv else "-"
    text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"worker config {source}: not JSON: {exc}") from None
    missing = [k for k in ("file", "strategy") if k not in config]
    if missing:
        raise WorkbenchError(f"worker config {source}: missing {', '.join(missing)}")
    return config


def run_load(config: Mapping[str, Any], stdout: Any = None) -> WorkerReport:
    """Open the device, time index + load, then verify; what happened as one :class:`WorkerReport`.

    ``stdout`` is where the report will go (a test's injected ``garbage`` fault writes there)."""
    t_import = time.monotonic()
    from workbench.formats import open_index
    from workbench.measure.run.faults import arm
    from workbench.measure.run.costs import CostProbe
    from workbench.strategies import get_strategy
    from workbench.upload import open_device

    strategy = get_strategy(config["strategy"]).from_strings(dict(config.get("params") or {}))
    _import_formats()
    t_init = time.monotonic()
    with open_device(config.get("device") or "host") as device:
        # Device facts are part of init: strategies ask for them (eviction policy), and the first
        # ask may import importlib.metadata (binding versions) — not inside the load window.
        info = device.info().to_json()
        # The strategy's own start-up (a peer's library and its CUDA context) is init too.
        t_prepare = time.monotonic()
        strategy.prepare(device)
        prepare_s = time.monotonic() - t_prepare
        arm(device, config, stdout or sys.stdout)  # tests only: WORKBENCH_TEST_FAULT
        recheck = _recheck_cache(config)  # the runner's check was ~0.7 s ago: what reclaim took, back
        probe = CostProbe(config.get("files") or [config["file"]], device)
        probe.open()
        modules = set(sys.modules)
        t_window = time.monotonic()
        index = open_index(config["file"])
        t_index = time.monotonic()
        result = strategy.load(index, device)
        t_loaded = time.monotonic()
        costs = probe.close(sum(t.nbytes for t in index.tensors))
        window_imports = sorted(set(sys.modules) - modules)
        verify = _verify(index, device, result, config.get("identity")) if config.get("verify", True) else None
        t_verified = time.monotonic()
    load = result.summary()
    resident_after, resident_files = _resident_after(index)
    spawn = config.get("spawn_monotonic")
    timings = Timings(
        startup_s=None if spawn is None else _T_ENTRY - float(spawn), import_s=t_init - t_import,
        init_s=t_window - t_init, window_s=t_loaded - t_window, verify_s=t_verified - t_loaded,
        total_s=time.monotonic() - _T_ENTRY, window_imports=tuple(window_imports[:50]), prepare_s=prepare_s)
    return WorkerReport(
        pid=os.getpid(), file=str(config["file"]), strategy=config["strategy"],
        device=config.get("device") or "host", device_info=info, load_s=t_loaded - t_window,
        init_s=t_window - t_init, index_s=t_index - t_window, verify_s=t_verified - t_loaded,
        load=dataclasses.replace(load, phases={**load.phases, "index": t_index - t_window}),
        verified=None if verify is None else verify.ok, verify=verify,
        resident_after=resident_after, resident_after_files=resident_files, timings=timings, costs=costs,
        cache_recheck=recheck)


def _recheck_cache(config: Mapping[str, Any]) -> Any:
    """The cache state the runner set (``cache`` in the config: state and thresholds), held once more
    just before the window (:func:`workbench.io.cache_recheck.recheck_model`); None without one."""
    cache = config.get("cache")
    if not isinstance(cache, Mapping) or not config.get("files"):
        return None
    from workbench.io.cache_recheck import recheck_model

    return recheck_model([str(f) for f in config["files"]], str(cache.get("state")),
                         warm_min=float(cache.get("warm_min", 0.98)), cold_max=float(cache.get("cold_max", 0.02)))


def _import_formats() -> None:
    """Import every format reader now: module import is start-up cost, not load (a compiled engine
    has its parser linked in), so it must not land in the window's ``index`` phase."""
    import importlib

    from workbench.formats import FORMATS

    for name in FORMATS:
        FORMATS.get(name)
    # Imported lazily on first use by the GGUF reader (gguf-py), by open_index's set resolution (a
    # model may be a set of files) and by every strategy's eviction policy (workbench.io); anything
    # else imported in the window is listed in ``window_imports``.
    for lazy in ("gguf", "workbench.formats.resolve", "workbench.formats.sets", "workbench.io.policy",
                 "workbench.io.pagecache"):
        with contextlib.suppress(ImportError):
            importlib.import_module(lazy)


def _verify(index: Any, device: Any, result: Any, identity: Any) -> VerifySummary:
    """Against the file hashes the attempt recorded (``identity``: real path → hash), when the runner sent them."""
    from workbench.measure.run.verify import verify_placements

    expected = {str(k): str(v) for k, v in identity.items()} if isinstance(identity, Mapping) else None
    return verify_placements(index, device, result.placements, expected).summary()


def _resident_after(index: Any) -> tuple[float | None, dict[str, float]]:
    """The model's resident fraction after the load, and each file's (every file of a set)."""
    from workbench.io.modelcache import model_residency

    try:
        seen = model_residency(index)
    except (OSError, WorkbenchError):
        return None, {}
    return seen.resident, seen.by_name()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 WorkbenchError, 1 anything else)."""
    out = sys.stdout
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    return answer(lambda: run_load(read_config(sys.argv[1:] if argv is None else argv), out), out,
                  "workbench.measure.run.worker")


def answer(produce: Callable[[], Any], out: Any, who: str) -> int:
    """A worker process's ending (the rank workers' too): ``produce()``'s report as one JSON line on
    ``out``, exit 0; a :class:`WorkbenchError` one line on stderr, exit 2; anything else its traceback, exit 1.
    Whatever ``produce`` prints goes to stderr: a chatty strategy must not corrupt the JSON."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            report = produce()
    except WorkbenchError as exc:
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - a bug: keep the traceback for the run's stderr tail
        traceback.print_exc()
        return 1
    out.write(json.dumps(report.to_json()) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
