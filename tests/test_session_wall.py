"""Every session turn holds its misses' staged GB/s against the wall they were read against (the disk
cold, the page cache at the lanes' thread count warm), in the turn's text line and its JSON, and the
summary gives the median turn's fraction; with no ceilings recorded, each turn says how to get one."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.ledger import Ledger
from workbench.measure.session.wall import NO_MISSES, NO_WALL, session_wall, turn_wall, wall_text

WALLS = {"cold_read_buffered_1t": 0.5, "cold_read_buffered_4t": 1.6, "cold_read_direct_4t": 1.2,
         "page_cache_read_1t": 3.0, "page_cache_read_2t": 5.0, "page_cache_read_8t": 9.0}


@pytest.fixture(autouse=True)
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_LOCK_DIR", str(tmp_path / "locks"))


def facts(lanes: int, reader: str = "pread") -> SessionFacts:
    return SessionFacts("bounce", "", "ON", reader, "", "on", "lru", 0, 0, 2, "synthetic", "", "host", False,
                        lanes=lanes)


def turn(disk_mib: float, io_mib: float, gbps: float, misses: int = 10) -> TurnRecord:
    return TurnRecord(0, 4, int(io_mib * 2**20), 1, misses, 0, 0, 0, 0, 0, 0, 1.0, 4.0,
                      disk_bytes_per_token=disk_mib * 2**20 / 4, io_bytes=int(io_mib * 2**20),
                      read_busy_s=0.1 if misses else 0.0, staged_gbps=gbps if misses else 0.0)


def test_a_cold_turn_is_held_against_the_disk_and_a_warm_one_against_the_page_cache_at_its_lanes():
    cold = turn_wall(WALLS, turn(disk_mib=8, io_mib=10, gbps=0.8), facts(lanes=2))
    assert (cold.wall_name, cold.wall_gbps) == ("cold_read_buffered_4t", 1.6)
    assert cold.staged_of_wall == pytest.approx(0.5) and wall_text(cold) == "50% of cold_read_buffered_4t (1.60 GB/s)"
    warm = turn_wall(WALLS, turn(disk_mib=1, io_mib=10, gbps=4.0), facts(lanes=2))
    assert (warm.wall_name, warm.staged_of_wall) == ("page_cache_read_2t", pytest.approx(0.8))
    direct = turn_wall(WALLS, turn(disk_mib=0, io_mib=10, gbps=0.6), facts(lanes=4, reader="direct-bounce"))
    assert direct.wall_name == "cold_read_direct_4t"  # O_DIRECT reads the disk whatever the cache holds
    session = session_wall(WALLS, [turn(8, 10, 0.8), turn(1, 10, 4.0), turn(5, 10, 1.0)], facts(lanes=8))
    assert session == ("page_cache_read_8t", 9.0)  # 14 of 30 MiB from the disk: warm
    assert session_wall(WALLS, [turn(9, 10, 0.8), turn(1, 10, 4.0), turn(6, 10, 1.0)], facts(8)) == \
        ("cold_read_buffered_4t", 1.6)  # 16 of 30: cold


def test_no_misses_and_no_ceilings_are_said_not_divided():
    none = turn_wall(WALLS, turn(0, 0, 0.0, misses=0), facts(lanes=1))
    assert none.staged_of_wall is None and wall_text(none) == NO_MISSES
    unmeasured = turn_wall({}, turn(8, 10, 0.8), facts(lanes=1))
    assert unmeasured.staged_of_wall is None and wall_text(unmeasured) == NO_WALL == "no wall: run `workbench ceilings`"


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def session_args(index, ledger, *extra):
    return ["session", index.path, "--turns", "3", "--tokens", "3", "--cache-mib", "0.5", "--experts-per-token",
            "2", "--ledger", str(ledger), "--campaign", "s", "--lanes", "2", *extra]


@pytest.fixture(scope="module")
def moe(synth_model):
    return synth_model("gguf", "moe", alignment=64, size=8 << 20, experts=32)


def test_every_turn_line_and_its_json_give_the_fraction_of_the_wall(moe, tmp_path):
    from workbench.settings.defaults import host_id

    ledger = tmp_path / "l.sqlite"
    with Ledger(ledger) as led:
        for name, gbps in WALLS.items():
            led.record_ceiling(name, gbps, {"threads": 1}, host=host_id())
    doc = json.loads(cli(*session_args(moe, ledger, "--cache", "warm", "--reader", "pread", "--json")).stdout)
    fractions = []
    for t in doc["turns"]:
        assert t["misses"] > 0 and t["wall_name"] == "page_cache_read_2t" and t["wall_gbps"] == 5.0, t
        assert t["staged_of_wall"] == pytest.approx(t["staged_gbps"] / 5.0)
        fractions.append(t["staged_of_wall"])
    assert doc["summary"]["staged_of_wall_median"] == pytest.approx(sorted(fractions)[1])
    text = cli(*session_args(moe, ledger, "--cache", "warm", "--reader", "pread"))
    lines = [line for line in text.stderr.splitlines() if line.split() and line.split()[0].isdigit()]
    assert len(lines) == 3 and all(line.endswith("of page_cache_read_2t (5.00 GB/s)") for line in lines), lines
    assert "GB/s of wall" in text.stderr
    assert "the median turn's" in text.stdout


def test_without_ceilings_every_turn_says_how_to_get_a_wall(moe, tmp_path):
    ledger = tmp_path / "l.sqlite"
    doc = json.loads(cli(*session_args(moe, ledger, "--cache", "warm", "--reader", "pread", "--json")).stdout)
    assert all(t["staged_of_wall"] is None and t["wall_note"] == NO_WALL for t in doc["turns"])
    assert doc["summary"]["staged_of_wall_median"] is None
    text = cli(*session_args(moe, ledger, "--cache", "warm", "--reader", "pread"))
    lines = [line for line in text.stderr.splitlines() if line.split() and line.split()[0].isdigit()]
    assert lines and all(line.endswith(NO_WALL) for line in lines), lines
    assert NO_WALL in text.stdout
