"""Fuzz cases for the model-file parsers, and running one case with its time and peak allocation.

A case is a header (mutated, truncated or random) plus a file size: the case file is the header
followed by a hole up to that size (sparse, so a real multi-GiB model's header costs nothing to
fuzz). Neither parser reads tensor bytes, so holes index exactly like data.

The contract checked for every case (issue 12): ``open_index`` returns an index whose tensors all lie
inside the file (distinct names, no overlaps, valid Unicode names, expert slices inside the file), or
raises ``FormatError`` whose message is one line naming the file and a field; nothing else; within
the time limit; and with a peak Python allocation (tracemalloc, numpy included) bounded by the
header's size, never by a size or count the header claims.
"""
from __future__ import annotations

import os
import re
import signal
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from hypothesis import strategies as st

from fuzz_gguf_cases import mutated_gguf
from fuzz_st_cases import mutated_safetensors
from workbench.errors import FormatError
from workbench.formats import open_index
from workbench.formats.index import TensorIndex

# Peak allocation allowed per case: a fixed allowance plus a multiple of the header's own bytes
# (JSON objects cost ~20-40x their text). A claimed 2^60-element tensor or 2^60-item array breaks it.
ALLOC_FIXED = 8 << 20
ALLOC_PER_HEADER_BYTE = 64
SYNTH_SIZE = 1 << 20  # the smallest size every layout (MoE experts are whole pages) fits in


@dataclass(frozen=True)
class Base:
    """A valid model file to mutate: its header bytes (through the data start) and its size."""

    name: str
    format: str
    head: bytes
    size: int


@dataclass(frozen=True)
class Case:
    kind: str  # random / truncate / mutate
    base: str
    head: bytes
    size: int  # the case file's size; the header is cut there, or followed by a hole up to it
    note: str = ""


@dataclass(frozen=True)
class Result:
    case: Case
    outcome: str  # "index", "FormatError: <field class>", "crash: <type>", "timeout"
    detail: str
    seconds: float
    peak_bytes: int
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def base_from_file(path: str | os.PathLike[str], name: str | None = None) -> Base:
    """A base from a model file that indexes cleanly (its header only is read)."""
    index = open_index(path)
    with open(path, "rb") as f:
        head = f.read(index.data_offset)
    return Base(name or f"real:{Path(path).name}", index.format, head, index.size)


def make_synth_bases(directory: Path) -> list[Base]:
    """The synthetic models, dense and MoE, both formats (plus one GGUF at 4096 alignment), and one
    file written by the safetensors package."""
    from workbench.formats.synth import write_synthetic

    directory.mkdir(parents=True, exist_ok=True)
    bases = []
    for fmt, layout, align in [("gguf", "dense", 32), ("gguf", "moe", 32), ("gguf", "moe", 4096),
                               ("safetensors", "dense", 32), ("safetensors", "moe", 32)]:
        path = directory / f"{layout}-a{align}.{fmt}"
        if not path.exists():
            write_synthetic(path, format=fmt, layout=layout, size=SYNTH_SIZE, experts=4, alignment=align, seed=1)
        bases.append(base_from_file(path, f"{fmt}-{layout}" + ("-a4096" if align != 32 else "")))
    return bases + _peer_base(directory)


def _peer_base(directory: Path) -> list[Base]:
    """A MoE-named safetensors written by the safetensors package itself (its header layout and
    padding), when that package is installed."""
    try:
        import numpy as np
        from safetensors.numpy import save_file
    except ImportError:
        return []
    path = directory / "peer.safetensors"
    if not path.exists():
        arrays = {f"model.layers.{layer}.mlp.experts.{e}.{p}_proj.weight": np.zeros((8, 4), np.float16)
                  for layer in range(2) for e in range(4) for p in ("gate", "up", "down")}
        arrays.update({"model.embed_tokens.weight": np.zeros((64, 4), np.float32),
                       "model.layers.0.mlp.gate.weight": np.zeros((4, 4), np.float32),
                       "model.layers.0.step": np.zeros((1,), np.int64), "mask": np.zeros((7,), np.uint8)})
        save_file(arrays, str(path), metadata={"format": "pt"})
    return [base_from_file(path, "safetensors-peer")]


def random_bytes() -> st.SearchStrategy[Case]:
    prefixes = st.sampled_from([b"", b"GGUF\x03\x00\x00\x00", b"GGUF\x00\x00\x00\x02", b"{", b"\x40\0\0\0\0\0\0\0{"])
    return st.tuples(prefixes, st.binary(max_size=4096)).map(
        lambda pb: Case("random", "-", pb[0] + pb[1], len(pb[0]) + len(pb[1])))


@st.composite
def truncated(draw, bases: list[Base]) -> Case:
    base = draw(st.sampled_from(bases))
    where = draw(st.one_of(st.integers(0, len(base.head)), st.integers(0, base.size - 1)))
    return truncate_case(base, where)


def truncate_case(base: Base, where: int) -> Case:
    return Case("truncate", base.name, base.head[:where], where, f"at {where}")


@st.composite
def mutated(draw, bases: list[Base]) -> Case:
    base = draw(st.sampled_from(bases))
    data_len = base.size - len(base.head)
    if base.format == "gguf":
        head, note = draw(mutated_gguf(base.head))
    else:
        head, note = draw(mutated_safetensors(base.head, data_len))
    delta = draw(st.sampled_from([0] * 12 + [-1, 1, -4096, 4096, -data_len]))
    return Case("mutate", base.name, head, max(0, len(head) + data_len + delta), note)


def cases(bases: list[Base]) -> st.SearchStrategy[Case]:
    """Every kind of case, weighted towards mutated real headers (they reach the deepest checks)."""
    return st.one_of(mutated(bases), mutated(bases), mutated(bases), truncated(bases), random_bytes())


def write_case(case: Case, path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, case.head[:case.size])
        os.ftruncate(fd, case.size)
    finally:
        os.close(fd)


class CaseTimeout(BaseException):
    """Raised by the alarm in a case that overran the hard limit (BaseException: nothing catches it)."""


@contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    if not seconds:
        yield
        return

    def fire(*_: object) -> None:
        raise CaseTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(case: Case, path: Path, limit_s: float, hard_limit_s: float | None = None) -> Result:
    """Index the case file under tracemalloc (started by the caller) and judge the outcome."""
    write_case(case, path)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    index, error, t0 = None, None, time.perf_counter()
    try:
        with _alarm(hard_limit_s):
            index = open_index(path)
    except CaseTimeout:
        error = CaseTimeout()
    except Exception as exc:  # noqa: BLE001 - anything but FormatError is what we are looking for
        error = exc
    seconds = time.perf_counter() - t0
    peak = max(0, tracemalloc.get_traced_memory()[1] - before)
    outcome, detail, problems = judge(case, path, index, error)
    if seconds > limit_s and outcome != "timeout":
        seconds = _untraced_seconds(path, hard_limit_s)  # tracing slows parsing 2-4x: judge the real time
    if seconds > limit_s:
        problems.append("slow")
    if peak > ALLOC_FIXED + ALLOC_PER_HEADER_BYTE * len(case.head):
        problems.append("alloc")
    return Result(case, outcome, detail, seconds, peak, tuple(problems))


def _untraced_seconds(path: Path, hard_limit_s: float | None, repeat: int = 3) -> float:
    """The case's time without tracemalloc, the best of ``repeat`` runs (on a shared machine one run
    may wait for a core; the best is the parser's own time)."""
    tracing = tracemalloc.is_tracing()
    tracemalloc.stop()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            with _alarm(hard_limit_s):
                open_index(path)
        except BaseException:  # noqa: BLE001 - the outcome was judged already; only the time is wanted
            pass
        best = min(best, time.perf_counter() - t0)
    if tracing:
        tracemalloc.start()
    return best


def judge(case: Case, path: Path, index: TensorIndex | None, error: BaseException | None) -> tuple[str, str, list[str]]:
    if isinstance(error, CaseTimeout):
        return "timeout", "", ["timeout"]
    if isinstance(error, FormatError):
        text = str(error)
        problems = [] if "\n" not in text and "\r" not in text else ["error not one line"]
        if error.path != str(path) or not text.startswith(str(path)) or not error.field.strip():
            problems.append("error does not name the file and a field")
        if not _printable(text):
            problems.append("error not printable")
        return f"FormatError: {field_class(error.field)}", text[:300], problems
    if error is not None:
        return f"crash: {type(error).__name__}", f"{type(error).__name__}: {str(error)[:300]}", ["crash"]
    problems = index_problems(index, case.size)
    return "index", f"{len(index)} tensors", [f"bad index: {p}" for p in problems]


def _printable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return text.isprintable()


def index_problems(index: TensorIndex, size: int) -> list[str]:
    """What makes an index unsafe to load from: any tensor byte outside the file, overlaps, odd names."""
    problems, names, prev_end = [], set(), 0
    if index.size != size:
        problems.append(f"size {index.size} != file size {size}")
    for t in sorted(index.tensors, key=lambda t: (t.offset, t.nbytes)):
        if t.nbytes < 0 or t.offset < index.data_offset or t.end > size:
            problems.append(f"tensor {t.name!r} [{t.offset}, {t.end}) outside the data region")
        if t.name in names:
            problems.append(f"duplicate tensor {t.name!r}")
        if not _encodable(t.name):
            problems.append(f"tensor name {t.name!r} is not valid Unicode")
        if t.nbytes and t.offset < prev_end:
            problems.append(f"tensor {t.name!r} overlaps the previous one")
        names.add(t.name)
        prev_end = max(prev_end, t.end) if t.nbytes else prev_end
    for b in index.blobs:
        if any(o < index.data_offset or n < 0 or o + n > size for o, n in b.slices):
            problems.append(f"expert blob {b.layer}/{b.name} has a slice outside the file")
    return problems


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_KNOWN = ("tensor", "header", "magic", "version", "tensor_count", "kv_count", "kv[", "data_offset",
          "gguf", "path", "size", "__metadata__", "general.alignment", "json", "weight_map", "metadata.",
          "split.", "format", "name")


def field_class(name: str) -> str:
    """A FormatError field without its particulars: "tensor '*'.dtype", "kv <key>.count" …"""
    name = re.sub(r"^tensor '.*'", "tensor '*'", name)  # greedy: a name may hold quotes itself
    name = re.sub(r"\[\d+\]", "[N]", _QUOTED.sub("'*'", name))
    if name.startswith(_KNOWN):
        return name
    for suffix in (".item_type", ".count", ".type", " length", "[N]"):
        if suffix in name:
            return f"kv <key>{name[name.index(suffix):]}"
    return "kv <key>"

