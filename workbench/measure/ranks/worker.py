"""``python -m workbench.measure.ranks.worker -`` — one rank of a multi-rank load, one JSON object out.

Started by :mod:`workbench.measure.ranks.launch` the way torchrun starts a rank (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` in the environment; env://
rendezvous); the config on stdin is ``{"file", "strategy", "params", "layout", "device", "transport",
"verify", "token", "pg_timeout_s"}``. Order of work:

1. join the process group (``transport``: gloo, or NCCL with a gloo group beside it for barriers; its
   timeout bounds every collective, so no rank waits forever on one that died), open the device;
2. a barrier, then the LOAD WINDOW on CLOCK_MONOTONIC (the node's one clock, so the parent can put
   every rank's window on one axis): index, this rank's plan under the layout, the strategy's load;
3. after the window: this rank's device bytes read back and compared with the file's (pread afresh).

A :class:`WorkbenchError` is one line on stderr and exit 2; anything else keeps its traceback, exit 1.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any, Mapping

from workbench.records import RankReport

CLOCK = time.CLOCK_MONOTONIC


def now() -> float:
    return time.clock_gettime(CLOCK)


def join_group(transport: str, timeout_s: float) -> tuple[Any, Any]:
    """(the collective group, a gloo group for barriers) after an env:// rendezvous."""
    import torch.distributed as dist

    if transport == "nccl":
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group(transport, init_method="env://", timeout=timedelta(seconds=timeout_s))
    cpu = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s)) if transport == "nccl" else None
    import torch

    # NCCL makes its communicator at the first collective (~1 s): start-up, not load, so one here
    warm = torch.zeros(1, device="cuda" if transport == "nccl" else "cpu")
    dist.all_reduce(warm)
    if transport == "nccl":
        torch.cuda.synchronize()
    return None, cpu


def rank_device(spec: str, local_rank: int) -> str:
    """``cuda`` (no ordinal): one device per local rank, round robin; ``cuda:N`` or ``host``: as named."""
    if ":" in spec or spec.startswith("host"):
        return spec
    import torch  # imported already by torch.distributed; its CUDA (or ROCm) device count

    return f"{spec}:{local_rank % max(torch.cuda.device_count(), 1)}"


def run_rank(config: Mapping[str, Any], stdout: Any) -> RankReport:
    import torch.distributed as dist

    from workbench.formats import open_index
    from workbench.measure.run.faults import arm
    from workbench.measure.run.worker import _import_formats
    from workbench.strategies.ranked import RankContext, get_ranked, plan_rank
    from workbench.upload import open_device

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    strategy = get_ranked(config["strategy"]).from_strings(dict(config.get("params") or {}))
    transport = str(config.get("transport") or "gloo")
    group, cpu_group = join_group(transport, float(config.get("pg_timeout_s") or 60))
    try:
        with open_device(rank_device(str(config.get("device") or "host"), local)) as device:
            arm(device, {"label": f"rank{rank}"}, stdout)  # tests only: WORKBENCH_TEST_FAULT by rank
            _import_formats()  # start-up, not load: as the single worker, readers imported before the window
            with contextlib.suppress(ImportError):
                import gguf  # noqa: F401 - the layout's quantization block sizes
            import workbench.io.descriptors  # noqa: F401
            dist.barrier(group=cpu_group)
            start = now()
            index = open_index(config["file"])
            plan = plan_rank(index, str(config["layout"]), rank, world)
            ctx = RankContext(index, plan, device, group=group, cpu_group=cpu_group, transport=transport,
                              local_rank=local, token=str(config.get("token") or os.getpid()))
            strategy.load(ctx)
            end = now()
            ok, detail, digest = verify_rank(ctx) if config.get("verify", True) else (None, "", "")
            info = device.info()
            ctx.free()
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return RankReport(rank=rank, world=world, pid=os.getpid(), start=start, end=end,
                      bytes_read=ctx.counters["bytes_read"], bytes_interconnect=ctx.counters["bytes_interconnect"],
                      bytes_held=plan.nbytes, n_slices=len(plan.slices), verified=ok, verify_detail=detail,
                      device=f"{info.backend} {info.name}", transport=transport, notes=tuple(ctx.notes),
                      phases=dict(ctx.phases), digest=digest)


def verify_rank(ctx: Any) -> tuple[bool, str, str]:
    """Each slice's device bytes against the file's (read afresh, independently of the strategy) and
    its padding against zeros; (ok, the first difference, sha256 of every slice's device bytes in order)."""
    import hashlib

    import numpy as np

    from workbench.strategies.toolkit import pread_into

    fds: dict[str, int] = {}
    digest, detail = hashlib.sha256(), ""
    try:
        for s, buf in zip(ctx.plan.slices, ctx.buffers):
            want = np.zeros(s.nbytes, dtype=np.uint8)
            pos = 0
            for offset, n in s.ranges:
                if s.file not in fds:
                    fds[s.file] = os.open(s.file, os.O_RDONLY | os.O_NOFOLLOW)
                pread_into(fds[s.file], want[pos:pos + n], offset, s.file)
                pos += n
            got = np.frombuffer(ctx.device.read_back(buf, 0, s.nbytes), dtype=np.uint8)
            digest.update(got)
            if not detail and not np.array_equal(got, want):
                at = int(np.flatnonzero(got != want)[0])
                detail = f"rank {ctx.rank}: {s.tensor} ({s.rule}) differs at byte {at} of {s.nbytes}"
    finally:
        for fd in fds.values():
            os.close(fd)
    return not detail, detail, digest.hexdigest()


def main() -> int:
    from workbench.measure.run.worker import answer

    faulthandler.enable(all_threads=True)
    out = sys.stdout
    return answer(lambda: run_rank(json.loads(sys.stdin.read()), out), out, f"rank {os.environ.get('RANK', '?')}")


if __name__ == "__main__":
    sys.exit(main())
