"""Fuzz both model-file parsers (GGUF: the header walk with gguf-py's tables; safetensors) and record what happened.

    python benchmarks/fuzz/fuzz_formats.py                                # 2000 random cases + every truncation
    python benchmarks/fuzz/fuzz_formats.py --cases 10000 --seed 1 --out docs/hardening/fuzz
    python benchmarks/fuzz/fuzz_formats.py --real /models/model-00001-of-00004.safetensors

Cases: headers of the synthetic models (dense and MoE, both formats) and of any ``--real`` file,
mutated field by field by hypothesis (see fuzz_gguf_cases / fuzz_st_cases), random bytes, and
truncation at every position of every header (``--truncate all``, the default); and sharded models
(a safetensors set with its index, a gguf-split set) with their index file, split keys and layout
mutated (``--set-cases``; fuzz_set_cases, judged by fuzz_sets). Each case is indexed
once under tracemalloc; the contract (one valid index or one FormatError line, within
``--time-limit``, peak allocation bounded by the header's size) is checked per case, see
fuzz_harness. Writes ``OUT.md`` and ``OUT.json``: count, total time, slowest case, peak allocation,
outcome classes with counts, every contract violation with examples, machine and date. Exit status 1
if any case broke the contract. Failing cases are saved under ``--keep`` to reproduce them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, defaultdict
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fuzz_harness as fh  # noqa: E402
import fuzz_sets as fs  # noqa: E402
from fuzz_set_cases import set_cases  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=2000, help="hypothesis-generated cases (default 2000)")
    p.add_argument("--set-cases", type=int, default=1000,
                   help="hypothesis-generated sharded-model cases: index files, split keys, layouts (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed (same seed, same cases)")
    p.add_argument("--time-limit", type=float, default=1.0, help="seconds one case may take (default 1)")
    p.add_argument("--hard-limit", type=float, default=30.0, help="abort a case after this many seconds")
    p.add_argument("--truncate", choices=("all", "none"), default="all",
                   help="also cut every base header at every position (default all)")
    p.add_argument("--real", action="append", default=[], help="a real model file to mutate (repeatable)")
    p.add_argument("--work", type=Path, default=None, help="scratch directory (default: under /dev/shm)")
    p.add_argument("--keep", type=Path, default=None, help="save the files of failing cases here")
    p.add_argument("--out", type=Path, default=None, help="write OUT.md and OUT.json")
    return p.parse_args(argv)


class Tally:
    """Everything the summary needs, accumulated case by case (results are not all kept)."""

    def __init__(self, keep: Path | None, scratch: Path):
        self.keep, self.scratch, self.n, self.kinds, self.outcomes = keep, str(scratch), 0, Counter(), Counter()
        self.samples: dict[str, list[str]] = defaultdict(list)
        self.problems: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.problem_counts: Counter[str] = Counter()
        self.seconds: list[float] = []
        self.slowest: fh.Result | None = None
        self.biggest: fh.Result | None = None

    def add(self, r: fh.Result) -> None:
        self.n += 1
        self.kinds[r.case.kind] += 1
        self.outcomes[r.outcome] += 1
        self.seconds.append(r.seconds)
        if len(self.samples[r.outcome]) < 2:
            self.samples[r.outcome].append(r.detail.replace(self.scratch, "CASE")[:160])
        if self.slowest is None or r.seconds > self.slowest.seconds:
            self.slowest = r
        if self.biggest is None or r.peak_bytes > self.biggest.peak_bytes:
            self.biggest = r
        for problem in r.problems:
            self.problem_counts[problem] += 1
            if len(self.problems[problem]) < 5:
                self.problems[problem].append(self._example(r))

    def _example(self, r: fh.Result) -> dict[str, Any]:
        ex = describe(r)
        if self.keep is not None:
            self.keep.mkdir(parents=True, exist_ok=True)
            path = self.keep / f"case-{self.n:06d}.bin"
            fh.write_case(r.case, path)
            ex["file"] = str(path)
        return ex


def describe(r: fh.Result) -> dict[str, Any]:
    c = r.case
    return {"kind": c.kind, "base": c.base, "mutation": c.note, "header_bytes": len(c.head), "size": c.size,
            "outcome": r.outcome, "detail": r.detail[:200], "seconds": round(r.seconds, 4),
            "peak_bytes": r.peak_bytes, "problems": list(r.problems)}


def run_truncations(bases: list[fh.Base], scratch: Path, args: argparse.Namespace, tally: Tally) -> None:
    for base in bases:
        for where in range(len(base.head) + 1):
            tally.add(fh.run_case(fh.truncate_case(base, where), scratch, args.time_limit, args.hard_limit))
        print(f"truncations of {base.name}: {len(base.head) + 1} cases", file=sys.stderr)


def run_generated(bases: list[fh.Base], scratch: Path, args: argparse.Namespace, tally: Tally) -> None:
    if not args.cases:
        return

    @settings(max_examples=args.cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(args.seed)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        tally.add(fh.run_case(data.draw(fh.cases(bases)), scratch, args.time_limit, args.hard_limit))
        if tally.n % 500 == 0:
            print(f"{tally.n} cases, {sum(tally.problem_counts.values())} problems", file=sys.stderr)

    one()


def run_sets(bases: list, scratch: Path, args: argparse.Namespace, tally: Tally) -> None:
    if not args.set_cases:
        return

    @settings(max_examples=args.set_cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(args.seed)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        case = data.draw(set_cases(bases, scratch))
        tally.add(fs.run_set_case(case, scratch, args.time_limit, args.hard_limit))
        if tally.n % 500 == 0:
            print(f"{tally.n} cases, {sum(tally.problem_counts.values())} problems", file=sys.stderr)

    one()


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo") if line.startswith("model name")), "")
    return {"uname": _uname(), "cores": os.cpu_count(), "cpu": cpu,
            "python": platform.python_version(), "gguf-py": metadata.version("gguf"),
            "hypothesis": metadata.version("hypothesis"), "commit": _commit()}


def _uname() -> str:
    try:
        return subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return " ".join(platform.uname())


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarize(tally: Tally, bases: list[fh.Base], set_bases: list, args: argparse.Namespace,
              wall: float) -> dict[str, Any]:
    secs = sorted(tally.seconds)
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
        "args": {"cases": args.cases, "set_cases": args.set_cases, "seed": args.seed, "time_limit_s": args.time_limit,
                 "truncate": args.truncate, "real": args.real},
        "bases": [{"name": b.name, "format": b.format, "header_bytes": len(b.head), "size": b.size} for b in bases]
        + [{"name": b.name, "format": b.format, "files": len(b.members), "header_bytes": sum(len(m.head) for m in
            b.members), "size": sum(m.size for m in b.members)} for b in set_bases],
        "count": tally.n, "kinds": dict(tally.kinds), "total_s": round(wall, 1),
        "parse_s": {"total": round(sum(secs), 1), "median": round(statistics.median(secs), 5),
                    "p99": round(secs[int(0.99 * (len(secs) - 1))], 5), "max": round(secs[-1], 4)},
        "slowest": describe(tally.slowest), "peak_alloc": describe(tally.biggest),
        "alloc_budget": f"{fh.ALLOC_FIXED >> 20} MiB + {fh.ALLOC_PER_HEADER_BYTE} x header bytes",
        "outcomes": dict(tally.outcomes.most_common()), "samples": dict(tally.samples),
        "problems": {k: {"count": tally.problem_counts[k], "examples": v} for k, v in tally.problems.items()},
        "contract_met": not tally.problem_counts,
    }


def markdown(s: dict[str, Any]) -> str:
    m, slow, big = s["machine"], s["slowest"], s["peak_alloc"]
    lines = [
        "# Parser fuzzing run", "",
        f"Date {s['date']} · machine `{m['uname']}` ({m['cpu']}, {m['cores']} cores) · Python {m['python']}, "
        f"gguf-py {m['gguf-py']}, hypothesis {m['hypothesis']} · workbench {m['commit']}", "",
        f"Command: `python benchmarks/fuzz/fuzz_formats.py --cases {s['args']['cases']} "
        f"--set-cases {s['args']['set_cases']} --seed {s['args']['seed']} "
        f"--time-limit {s['args']['time_limit_s']} --truncate {s['args']['truncate']}`"
        + "".join(f" --real {r}" for r in s["args"]["real"]), "",
        f"**{s['count']} cases** ({', '.join(f'{k} {v}' for k, v in s['kinds'].items())}) in {s['total_s']} s; "
        f"parsing {s['parse_s']['total']} s (median {s['parse_s']['median'] * 1e3:.2f} ms, "
        f"p99 {s['parse_s']['p99'] * 1e3:.1f} ms, max {s['parse_s']['max'] * 1e3:.1f} ms, under tracemalloc "
        "except where a case over the limit was re-timed without it, best of 3).", "",
        f"Contract (one valid index or one FormatError line naming a file of the model; ≤ "
        f"{s['args']['time_limit_s']} s; peak allocation ≤ {s['alloc_budget']}; for sets, no file outside the "
        f"model's directory opened): **{'met by every case' if s['contract_met'] else 'BROKEN, see below'}**.", "",
        f"Slowest case: {slow['seconds'] * 1e3:.1f} ms — {slow['kind']} of {slow['base']} ({slow['mutation']}) → "
        f"{slow['outcome']}.",
        f"Largest peak allocation: {big['peak_bytes'] / 2**20:.2f} MiB — {big['kind']} of {big['base']} "
        f"({big['header_bytes']}-byte header; {big['mutation']}) → {big['outcome']}.", "",
        "Bases: " + ", ".join(f"{b['name']} ({b['files'] if 'files' in b else 1} files, {b['header_bytes']} B "
                              f"header{'s' if 'files' in b else ''}, {b['size']} B)" for b in s["bases"]), "",
        "| outcome | cases | example |", "|---|---:|---|",
    ]
    for outcome, count in s["outcomes"].items():
        example = (s["samples"].get(outcome) or [""])[0].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {outcome} | {count} | {example[:110]} |")
    for problem, info in s["problems"].items():
        lines += ["", f"## Violation: {problem} ({info['count']} cases)", ""]
        lines += [f"- {json.dumps(ex, ensure_ascii=True)[:400]}" for ex in info["examples"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shm = Path("/dev/shm")
    work = args.work or Path(tempfile.mkdtemp(prefix="wb-fuzz-", dir=shm if shm.is_dir() else None))
    bases = fh.make_synth_bases(work / "bases") + [fh.base_from_file(p) for p in args.real]
    set_bases = fs.make_set_bases(work / "bases")
    scratch = work / "case"
    set_scratch = work / "sets" / "model"
    tally = Tally(args.keep, scratch)
    for b in bases:  # first parses import gguf-py and fill caches; keep them out of the measured peaks
        fh.run_case(fh.truncate_case(b, b.size), scratch, args.time_limit)
    for sb in set_bases:
        fs.run_set_case(fs.whole_case(sb), set_scratch, args.time_limit)
    tracemalloc.start()
    t0 = time.perf_counter()
    if args.truncate == "all":
        run_truncations(bases, scratch, args, tally)
    run_generated(bases, scratch, args, tally)
    run_sets(set_bases, set_scratch, args, tally)
    summary = summarize(tally, bases, set_bases, args, time.perf_counter() - t0)
    tracemalloc.stop()
    text = markdown(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1, ensure_ascii=True) + "\n")
    print(text)
    return 0 if summary["contract_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
