"""Running one set case (fuzz_set_cases) and judging it by the set contract (issue 17 §4).

The contract for a set: ``open_index`` returns an index whose every file lies in the case directory
and whose tensors each lie inside their own file's data (distinct names across the set, no overlaps
within a file), or raises ``FormatError`` in one printable line naming a file of the case directory
(or the directory) and a field; nothing else; within the time limit and the allocation bound (the
headers of every member together); and it never opens a file outside the model's directory — the
bait files beside the case directory are watched with an audit hook (every ``open`` of Python and
``os.open`` raises one), and a FIFO member would block any open of it until the hard limit.
"""
from __future__ import annotations

import os
import sys
import time
import tracemalloc
from pathlib import Path

import fuzz_harness as fh
from fuzz_set_cases import BAIT, OUTSIDE, SetBase, SetCase, set_base, write_set_case
from workbench.errors import FormatError, printable
from workbench.formats import open_index
from workbench.formats.index import TensorIndex

SET_SIZE = 512 << 10  # three shards of a small model: the headers are what is fuzzed
_watch: dict[str, object] = {"paths": frozenset(), "opened": []}


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watch["paths"] and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if os.path.realpath(path) in _watch["paths"]:
            _watch["opened"].append(path)


sys.addaudithook(_audit)  # process-wide and permanent, so it only looks while a case runs


def make_set_bases(directory: Path, hub: bool = True) -> list[SetBase]:
    """Good sets to break: safetensors shards with their index (dense and MoE), a gguf-split set,
    and (``hub``, when torch and huggingface_hub are installed) a checkpoint sharded by huggingface_hub."""
    from workbench.formats.synth import write_synthetic

    bases = []
    for fmt, layout in [("safetensors", "dense"), ("safetensors", "moe"), ("gguf", "dense")]:
        out = directory / f"set-{fmt}-{layout}"
        if not out.exists():
            write_synthetic(out, format=fmt, layout=layout, size=SET_SIZE, experts=4, shards=3, seed=2)
        bases.append(set_base(out, f"set-{fmt}-{layout}"))
    return bases + (_hub_base(directory) if hub else [])


def _hub_base(directory: Path) -> list[SetBase]:
    try:
        import torch
        from huggingface_hub import save_torch_state_dict
    except ImportError:
        return []
    out = directory / "set-hub"
    if not out.exists():
        out.mkdir(parents=True)
        state = {f"model.layers.{i}.mlp.{p}.weight": torch.zeros((7, 3 + i), dtype=torch.bfloat16)
                 for i in range(4) for p in ("gate_proj", "up_proj")}
        save_torch_state_dict(state, str(out), max_shard_size=200)
    return [set_base(out, "set-hub")]


def make_bait(scratch: Path) -> Path:
    """The files outside the case directory a case must never open."""
    outside = scratch.parent / OUTSIDE
    outside.mkdir(parents=True, exist_ok=True)
    bait = outside / BAIT
    if not bait.exists():
        bait.write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")  # a valid empty safetensors file
    return bait


def run_set_case(case: SetCase, scratch: Path, limit_s: float, hard_limit_s: float | None = None) -> fh.Result:
    """Index the case laid out in ``scratch`` under tracemalloc (started by the caller), judged."""
    bait = make_bait(scratch)
    path = write_set_case(case, scratch)
    # the file the user names is theirs to point anywhere (a link to a model kept elsewhere): only
    # what resolution finds must stay inside the directory
    named = os.path.realpath(path) if case.named else ""
    _watch["paths"], _watch["opened"] = frozenset({str(bait.resolve())} - {named}), []
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    index, error, t0 = None, None, time.perf_counter()
    try:
        with fh._alarm(hard_limit_s):
            index = open_index(path)
    except fh.CaseTimeout:
        error = fh.CaseTimeout()
    except Exception as exc:  # noqa: BLE001 - anything but FormatError is what we are looking for
        error = exc
    finally:
        _watch["paths"] = frozenset()
    seconds = time.perf_counter() - t0
    peak = max(0, tracemalloc.get_traced_memory()[1] - before)
    outcome, detail, problems = judge_set(scratch, index, error)
    if _watch["opened"]:
        problems.append("read outside the model")
    if seconds > limit_s and outcome != "timeout":
        seconds = fh._untraced_seconds(path, hard_limit_s)  # tracing slows parsing 2-4x: judge the real time
    if seconds > limit_s:
        problems.append("slow")
    if peak > fh.ALLOC_FIXED + fh.ALLOC_PER_HEADER_BYTE * len(case.head):
        problems.append("alloc")
    return fh.Result(case, outcome, detail, seconds, peak, tuple(problems))  # type: ignore[arg-type]


def judge_set(scratch: Path, index: TensorIndex | None, error: BaseException | None) -> tuple[str, str, list[str]]:
    if isinstance(error, fh.CaseTimeout):
        return "timeout", "", ["timeout"]
    if isinstance(error, FormatError):
        text, problems = str(error), []
        if "\n" in text or "\r" in text:
            problems.append("error not one line")
        if not (error.path == str(scratch) or error.path.startswith(str(scratch) + os.sep)) \
                or not text.startswith(printable(error.path)) or not error.field.strip():
            problems.append("error does not name a file of the model and a field")
        if not fh._printable(text):
            problems.append("error not printable")
        return f"FormatError: {fh.field_class(error.field)}", text[:300], problems
    if error is not None:
        return f"crash: {type(error).__name__}", f"{type(error).__name__}: {str(error)[:300]}", ["crash"]
    return "index", f"{len(index)} tensors in {len(index.files)} files", \
        [f"bad index: {p}" for p in set_problems(index, scratch)]


def set_problems(index: TensorIndex, scratch: Path) -> list[str]:
    """What makes a set's index unsafe to load from: a file outside the model, a tensor outside its
    file's data, a name twice, overlaps within a file."""
    problems, names = [], set()
    real = os.path.realpath(scratch)
    for f, tensors in index.by_file():
        if not os.path.realpath(f.path).startswith(real + os.sep):
            problems.append(f"file {f.path} outside the model's directory")
        size = os.stat(f.path).st_size
        prev_end = 0
        for t in tensors:
            if t.nbytes < 0 or t.offset < f.data_offset or t.end > size:
                problems.append(f"tensor {t.name!r} [{t.offset}, {t.end}) outside {f.name}'s data")
            if t.nbytes and t.offset < prev_end:
                problems.append(f"tensor {t.name!r} overlaps the previous one in {f.name}")
            prev_end = max(prev_end, t.end)
        names.update(t.name for t in tensors)
    if len(names) != len(index.tensors):
        problems.append("a tensor name twice in the set")
    return problems


def whole_case(base: SetBase) -> SetCase:
    """The base set unchanged (the control, and the warm-up before the measured cases)."""
    return SetCase("whole", base.name, base.members)
