"""``workbench strategies [--json]`` lists every registered strategy with parameters and availability."""
from __future__ import annotations

import json

from click.testing import CliRunner

from workbench.cli import main
from workbench.strategies import STRATEGIES, get_strategy

SEVEN = {"pread", "willneed", "warmer", "mmap", "populate", "lanes", "odirect"}


def test_strategies_json_lists_every_registered_strategy():
    out = CliRunner().invoke(main, ["strategies", "--json"])
    assert out.exit_code == 0, out.output
    infos = json.loads(out.output)
    names = [i["name"] for i in infos]
    assert names == STRATEGIES.names() and SEVEN <= set(names)
    for info in infos:
        cls = get_strategy(info["name"])
        # what is installed (no import), and a GPU-only peer is unavailable on the default host backend
        expected = bool(cls.installed()) and not getattr(cls, "gpu_only", False)
        assert info["summary"] == cls.summary and info["available"] == expected
        if info["available"]:
            assert bool(cls.available())  # installed and importable agree here
        params = {p["name"]: p for p in info["params"]}
        assert {k: p["default"] for k, p in params.items()} == cls.param_defaults()
        assert params["evict"]["type"] == "bool | None"
        assert isinstance(info["reason"], str)


def test_strategies_json_shows_typed_defaults():
    infos = {i["name"]: i for i in json.loads(CliRunner().invoke(main, ["strategies", "--json"]).output)}
    warmer = {p["name"]: p for p in infos["warmer"]["params"]}
    assert (warmer["threads"]["default"], warmer["threads"]["type"]) == (4, "int")
    assert (warmer["chunk_mib"]["default"], warmer["gate"]["default"]) == (16, 0.9)
    assert {p["name"] for p in infos["odirect"]["params"]} >= {"threads", "bounce_mib"}
    assert "MADV_POPULATE_READ" in infos["populate"]["reason"]


def test_strategies_human_output_names_each_strategy():
    out = CliRunner().invoke(main, ["strategies"])
    assert out.exit_code == 0
    for name in STRATEGIES.names():
        assert any(line.startswith(name) for line in out.output.splitlines())


def _detail_column(line: str) -> int:
    """Where a line's text after the strategy name (or its indentation) starts."""
    if line.startswith(" "):
        return len(line) - len(line.lstrip(" "))
    name, rest = line.split(" ", 1)
    return len(name) + 1 + len(rest) - len(rest.lstrip(" "))


def test_strategies_human_output_aligns_long_names():
    from workbench.cli.commands.strategies import _human

    infos = [{"name": "pread", "summary": "a", "available": True, "reason": "", "params": []},
             {"name": "peer-safetensors", "summary": "b", "available": False, "reason": "no module", "params": []}]
    lines = [line for info in infos for line in _human(info, len("peer-safetensors"))]
    assert {_detail_column(line) for line in lines} == {len("peer-safetensors") + 1}
    out = CliRunner().invoke(main, ["strategies"]).output.splitlines()
    assert len({_detail_column(line) for line in out}) == 1


def test_strategies_ranked_lists_every_ranked_strategy():
    """`--ranks N` strategies are found from their names in one hop too: `strategies --ranked`."""
    from workbench.strategies.ranked import RANKED

    infos = json.loads(CliRunner().invoke(main, ["strategies", "--ranked", "--json"]).output)
    assert [i["name"] for i in infos] == RANKED.names() and {"whole", "ranges", "shm", "scatter"} <= set(RANKED)
    for info in infos:
        cls = RANKED.get(info["name"])
        assert info["kind"] == "ranked" and info["summary"] == cls.summary and info["summary"]
        assert {p["name"]: p["default"] for p in info["params"]} == cls.param_defaults()
    text = CliRunner().invoke(main, ["strategies", "--ranked"]).output.splitlines()
    assert all(any(line.startswith(name) for line in text) for name in RANKED.names())
    assert not any(line.startswith("pread") for line in text)
