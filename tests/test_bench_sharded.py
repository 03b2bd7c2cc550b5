"""benchmarks/bench/bench_sharded.py picks the peers' rows as asked: warm, an O_DIRECT default reads the disk
whatever the cache holds, so ``buffered-only`` keeps each peer's direct=0 row and drops its default."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from workbench.formats.synth import write_synthetic

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_sharded", ROOT / "benchmarks" / "bench" / "bench_sharded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_peer_rows_by_mode(bench, tmp_path: Path) -> None:
    from workbench.strategies import STRATEGIES

    index = write_synthetic(tmp_path / "m", format="safetensors", layout="dense", size=2 << 20, dtype="bf16",
                            shards=2)
    rows = {mode: bench.peer_specs(index, "host", mode)[0] for mode in ("defaults", "buffered", "buffered-only")}
    if not rows["defaults"]:
        pytest.skip("no peer library installed")
    with_direct = {n for n in rows["defaults"] if "direct" in STRATEGIES.get(n).param_defaults()}
    assert rows["buffered"] == [r for n in rows["defaults"] for r in [n, *([f"{n} direct=0"] if n in with_direct else [])]]
    assert rows["buffered-only"] == [f"{n} direct=0" if n in with_direct else n for n in rows["defaults"]]
    assert not any(r in with_direct for r in rows["buffered-only"])  # no O_DIRECT default left in a warm row
