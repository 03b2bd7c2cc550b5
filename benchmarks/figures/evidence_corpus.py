"""The evidence corpus as a table: each loading pattern and fake of ``tests/engines/corpus_engine.py``,
run once warm and once cold through ``workbench external``'s timing, with the grade its run got.

    python benchmarks/figures/evidence_corpus.py [--runs N] [--out FILE.md]

Prints (and writes with ``--out``) a Markdown table — pattern, real or fake, the grade cold and warm, and
whether that is right (a real loader credited: ``bytes-read``/``mapping-touched``; a fake never) — headed by
the machine, the kernel, the date and n; exits 1 when any run is wrong. Models: 4 MiB, written by the
safetensors library, gguf-py and huggingface_hub (``corpus_engine.write_models``). Takes ~1 minute on a
2-core VM (48 runs).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("corpus_engine", ROOT / "tests" / "engines" / "corpus_engine.py")
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

from workbench.errors import CacheStateError  # noqa: E402
from workbench.records.external import CREDITED  # noqa: E402


def grades(name: str, models: dict[str, Path], cache: str, runs: int) -> Counter[str]:
    """The grades of ``runs`` runs of ``name`` (``unreachable``: the cache state could not be set)."""
    out: Counter[str] = Counter()
    for _ in range(runs):
        try:
            result = corpus.run_pattern(name, models, cache)
        except CacheStateError:
            out["unreachable"] += 1
            continue
        evidence = result.report.external.evidence if result.report and result.report.external else None
        out["failed" if result.error else evidence.level if evidence else "none"] += 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each pattern in each cache state")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evidence-corpus-") as tmp:
        models = corpus.write_models(Path(tmp))
        rows, wrong = [], 0
        for kind, patterns in (("real", corpus.REAL), ("fake", corpus.FAKE)):
            for pattern in patterns:
                name = pattern.__name__
                if corpus.MODEL_FOR.get(name, "st") not in models:
                    rows.append(f"| {name} | {kind} | not run (transformers not installed) | | |")
                    continue
                cells = []
                for cache in ("cold", "warm"):
                    got = grades(name, models, cache, args.runs)
                    bad = sum(k for g, k in got.items() if (g in CREDITED) != (kind == "real") and g != "unreachable")
                    wrong += bad
                    cells.append(", ".join(f"{g} {k}/{args.runs}" for g, k in got.most_common()) + (" **WRONG**" if bad else ""))
                rows.append(f"| {name} | {kind} | {cells[0]} | {cells[1]} |")
    head = (f"{platform.node()}, Linux {platform.release()}, {os.cpu_count()} cores, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, n = {args.runs} per cell, "
            f"4 MiB models; wrong: {wrong}\n\n| pattern | kind | cold | warm |\n|---|---|---|---|\n")
    table = head + "\n".join(rows) + "\n"
    print(table, end="")
    if args.out is not None:
        args.out.write_text(table)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
