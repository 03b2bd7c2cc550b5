"""Issue 35 §6: a failure injected at every point of a ``lanes`` and a ``ring`` load, hundreds of times,
beside busy processes: every load must finish or fail — never hang.

    PYTHONPATH=<checkout> python benchmarks/hardening/stress_lanes_ring.py [--loads 600] [--busy 2] [--hang-s 60]
                              [--jitter 0.3] [--only lanes|ring] [--seed 0] [--device host|deferred|cuda] [--json OUT]

A dry run of each variant counts the calls each point gets (a lane's or reader's pread, the eviction
policy's drops, a staging token or slot taken and handed back, a slot filled, a copier's hand-over, a
reader's descriptor, and the device's copies, allocations, fences and synchronizations); each stress load
then picks a variant, a point and a call k at random and makes that call raise. Each load runs under a
faulthandler watchdog (``--hang-s``: every thread's stack is dumped, "Timeout" on stderr, exit 1); the
interpreter's switch interval is varied per load (0.01 ms to 50 ms), ``--busy`` processes spin beside
it, and with ``--jitter p`` a token or slot handed back keeps the GIL 60-120 ms after its put with
chance p (at most 3 times a load), so waiters are woken late and robbed as on a loaded CI machine. After each load no thread
of it may be left, and what it placed is freed. ``--device deferred`` runs the host backend with copies
that land only when a fence or event after them is waited on (a GPU's ordering, tests/device_fakes.py);
``--device cuda`` the real thing (benchmarks/gpu/gpu_session.sh, step ``stress-lanes-ring``).
Prints one JSON object: loads, failures injected, loads finished, other errors (each named), hangs.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("lanes", {"threads": 3, "chunk_mib": 1}),
    ("lanes", {"threads": 3, "chunk_mib": 1, "evict": True}),
    ("lanes", {"threads": 3, "chunk_mib": 1, "upload": "pinned"}),
    ("lanes", {"threads": 4, "chunk_mib": 1, "upload": "pinned", "staging": "anon"}),
    ("ring", {"slot_mib": 1, "cold_mib": 1, "threads": 3, "cold_threads": 2, "direct": "off"}),
    ("ring", {"slot_mib": 1, "cold_mib": 1, "threads": 3, "cold_threads": 2, "direct": "off", "gate": 0.0}),
    ("ring", {"slot_mib": 1, "threads": 3, "direct": "off", "gate": 0.0, "copier": "one"}),
    ("ring", {"slot_mib": 1, "threads": 3, "direct": "off", "gate": 0.0, "provision": "background",
              "staging": "alloc"}),
    ("ring", {"slot_mib": 1, "threads": 3, "direct": "off", "gate": 0.0, "provision": "upfront", "spare": 0}),
    ("ring", {"slot_mib": 1, "threads": 3, "direct": "off", "gate": 0.0, "start": "each", "evict": True}),
    ("ring", {"slot_mib": 1, "threads": 3, "gate": 0.0}),  # direct: read straight into host memory
]
DEVICE_POINTS = ("copy_h2d", "alloc", "alloc_many", "alloc_pinned", "register_host", "create_fence",
                 "record_fence", "wait_fence", "synchronize")
SWITCH_S = (1e-5, 1e-4, 1e-3, 5e-3, 0.05)
THREAD_PREFIXES = ("lanes-", "ring-", "staging", "copier")


HANDS_BACK = ("token.release", "slot.release", "slot.hand_back")  # a put that wakes a waiting reader
MAX_STALLS = 3  # per load: a load of 200 pieces would otherwise stall for seconds


def hold_the_gil(seconds: float) -> None:
    """Keep the GIL for ``seconds`` after handing a token back: the woken waiter cannot run, and another
    reader may take the token first — a loaded 2-core machine's 50 ms off the GIL, made often."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(max(1.0, seconds * 2))
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    finally:
        sys.setswitchinterval(interval)


class InjectedFailure(RuntimeError):
    """Raised on purpose at the chosen point's chosen call."""


def code_points() -> dict[str, tuple[Any, str]]:
    """Point name → (owner, attribute) of the functions and methods a failure is injected into."""
    from workbench.io.descriptors import ReaderFiles
    from workbench.strategies import lanes, ring_readers, toolkit
    from workbench.upload.copier import Copier
    from workbench.upload.staging import StagingRing

    return {
        "lanes.pread": (lanes, "pread_into"), "ring.pread": (ring_readers, "pread_into"),
        "evict.drop": (toolkit.Evictor, "drop"), "evict.finish": (toolkit.Evictor, "finish"),
        "token.acquire": (lanes._Staging, "acquire"), "token.release": (lanes._Staging, "release"),
        "slot.acquire": (StagingRing, "acquire"), "slot.release": (StagingRing, "release"),
        "slot.filled": (StagingRing, "filled"), "slot.hand_back": (StagingRing, "hand_back"),
        "copier.submit": (Copier, "submit"), "reader.fd": (ReaderFiles, "fd"),
    }


class Injector:
    """Counts every point's calls and raises at call ``k`` of point ``target`` (None: counts only)."""

    def __init__(self, device: Any, jitter: float = 0.0, seed: int = 0):
        self.device, self.counts, self.target, self.k, self.fired = device, {}, None, 0, 0
        self.jitter, self.rng, self.stalls = jitter, random.Random(seed), 0
        self._lock = threading.Lock()
        self._saved: list[tuple[Any, str, Any, bool]] = []

    def arm(self, target: str | None, k: int = 0) -> None:
        self.counts, self.target, self.k, self.fired, self.stalls = {}, target, k, 0, 0

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                n = self.counts[name] = self.counts.get(name, 0) + 1
                fire = name == self.target and n == self.k
                self.fired += fire
                stall = name in HANDS_BACK and self.stalls < MAX_STALLS and self.rng.random() < self.jitter
                self.stalls += stall
            if fire:
                raise InjectedFailure(f"{name} call {n} failed on purpose")
            try:
                return real(*args, **kwargs)
            finally:
                if stall:
                    hold_the_gil(self.rng.uniform(0.06, 0.12))
        return wrapper

    def __enter__(self) -> "Injector":
        for name, (owner, attr) in code_points().items():
            self._patch(owner, attr, name)
        for attr in DEVICE_POINTS:
            self._patch(self.device, attr, f"device.{attr}")
        return self

    def _patch(self, owner: Any, attr: str, name: str) -> None:
        own = attr in vars(owner) if not isinstance(owner, type) else attr in owner.__dict__
        real = getattr(owner, attr)
        self._saved.append((owner, attr, owner.__dict__.get(attr) if own else None, own))
        if isinstance(owner, type):  # a method: wrap the function, keep it a method
            func = owner.__dict__.get(attr) or real
            wrapped = self._wrap(name, func)
            setattr(owner, attr, wrapped)
        else:
            setattr(owner, attr, self._wrap(name, real))

    def __exit__(self, *exc: object) -> None:
        for owner, attr, value, own in reversed(self._saved):
            if own:
                setattr(owner, attr, value)
            else:
                delattr(owner, attr)


def open_stress_device(kind: str) -> Any:
    from workbench.upload import open_device

    if kind in ("host", "cuda"):
        return open_device(kind)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
    from device_fakes import DeferredCopyDevice  # noqa: E402 - the tests' GPU stand-in

    return DeferredCopyDevice()


def make_models(root: Path) -> list[Any]:
    from workbench.formats.synth import write_synthetic

    return [write_synthetic(root / "shards", format="safetensors", layout="moe", size=2 << 20, shards=3),
            write_synthetic(root / "one.gguf", format="gguf", layout="dense", size=1 << 20)]


def load_once(name: str, params: dict[str, Any], index: Any, device: Any) -> str:
    """One load: 'finished' (placements freed) or 'injected'; anything else is raised."""
    from workbench.strategies import get_strategy
    from workbench.strategies.base import free_placements

    strategy = get_strategy(name)(**params)
    try:
        result = strategy.load(index, device)
    except BaseException as exc:  # noqa: BLE001 - sorted below
        if _injected(exc):
            return "injected"
        raise
    free_placements(device, result)
    return "finished"


def _injected(exc: BaseException | None) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, InjectedFailure):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def left_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIXES) and t.is_alive()]


def spin_busy(n: int) -> list[subprocess.Popen]:
    """``n`` processes spinning on a core each; they die with this process, a hang's exit included."""
    from workbench.measure.lock.reaper import die_with_me

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=die_with_me())
            for _ in range(n)]


def stress(loads: int, busy: int, hang_s: float, seed: int, device_kind: str, jitter: float = 0.0,
           only: str = "") -> dict[str, Any]:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="stress-lanes-ring-"))
    spinners = spin_busy(busy)
    device = open_stress_device(device_kind)
    figures: dict[str, Any] = {"machine": platform.node(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "cores": os.cpu_count(), "device": device_kind, "busy": busy, "seed": seed,
                               "jitter": jitter, "only": only or "lanes and ring", "loads": 0, "injected": 0, "finished": 0, "other": [], "left_threads": [],
                               "by_point": {}, "hangs": 0, "hang_s": hang_s}
    interval = sys.getswitchinterval()
    t0 = time.monotonic()
    try:
        models = make_models(root)
        with Injector(device, jitter, seed) as inject:
            plans = []
            for name, params in [v for v in VARIANTS if v[0].startswith(only)]:  # dry run: points reached, how often
                for index in models:
                    inject.arm(None)
                    load_once(name, params, index, device)
                    plans.append((name, params, index, dict(inject.counts)))
            slowest = 0.0
            for n in range(loads):
                name, params, index, counts = plans[n % len(plans)]
                point = rng.choice(sorted(counts))
                k = rng.randint(1, counts[point])
                inject.arm(point, k)
                sys.setswitchinterval(rng.choice(SWITCH_S))
                faulthandler.dump_traceback_later(hang_s, exit=True)  # a hang: every stack, then exit
                started = time.monotonic()
                try:
                    outcome = load_once(name, params, index, device)
                except BaseException as exc:  # noqa: BLE001 - not ours: named in the figures
                    outcome = "other"
                    figures["other"].append(f"{name} {params} {point}#{k}: {type(exc).__name__}: {exc}"[:300])
                finally:
                    faulthandler.cancel_dump_traceback_later()
                    sys.setswitchinterval(interval)
                slowest = max(slowest, time.monotonic() - started)
                figures["loads"] += 1
                if outcome != "other":
                    figures[outcome] += 1
                    figures["by_point"].setdefault(point, {"injected": 0, "finished": 0})[outcome] += 1
                if (n + 1) % 50 == 0:  # a hang's dump then says how far the stress got
                    print(f"stress: {n + 1}/{loads} loads, {figures['injected']} failures injected, "
                          f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
                left = left_threads()
                if left:
                    figures["left_threads"].append(f"{name} {point}#{k}: {left}")
            figures["slowest_load_s"] = round(slowest, 3)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
        device.close()
    figures["seconds"] = round(time.monotonic() - t0, 1)
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=600)
    ap.add_argument("--busy", type=int, default=2, help="processes spinning beside the loads")
    ap.add_argument("--hang-s", type=float, default=60.0, help="a load this long is a hang: stacks, exit 1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("host", "deferred", "cuda"), default="host")
    ap.add_argument("--jitter", type=float, default=0.3,
                    help="chance that a hand-back keeps the GIL 60-120 ms after its put (robbed wake-ups)")
    ap.add_argument("--only", default="", help="only the variants of this strategy (lanes or ring)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    faulthandler.enable()
    figures = stress(args.loads, args.busy, args.hang_s, args.seed, args.device, args.jitter, args.only)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if not figures["other"] and not figures["left_threads"] else 2  # 1: a hang (faulthandler)


if __name__ == "__main__":
    sys.exit(main())
