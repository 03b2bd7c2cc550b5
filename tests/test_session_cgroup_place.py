"""Where a session's memory cgroup is made (issue 33 §4), on a simulated cgroup v2 tree: a temp directory
standing in for /sys/fs/cgroup, with the files the kernel keeps, and a ``mkdir`` that makes a child's
interface files the way the kernel does (``memory.max`` only where the parent's ``cgroup.subtree_control``
holds ``memory``). The machine under test has a v1 memory controller only, so no real v2 tree can be
made here; the H200's shape (2026-12-04) is the first case."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import workbench.measure.session.pressure as pressure
from workbench.errors import ParamError
from workbench.measure.session import cgroups
from workbench.measure.session.pressure import MemoryPressure

MiB = 1 << 20
OWN = "/process_api/f380"


class Tree:
    """A cgroup v2 hierarchy in a directory: levels with their controllers, subtree_control and procs."""

    def __init__(self, root: Path, controllers: str = "cpu io memory pids"):
        self.root = root
        root.mkdir()
        for name, text in (("cgroup.controllers", controllers), ("cgroup.subtree_control", ""), ("cgroup.procs", "1")):
            (root / name).write_text(text)

    def level(self, rel: str, subtree: str = "", procs: str = "") -> Path:
        path = self.root / rel.lstrip("/")
        self.mkdir(str(path))
        (path / "cgroup.subtree_control").write_text(subtree)
        (path / "cgroup.procs").write_text(procs)
        return path

    def mkdir(self, path: str) -> None:
        """What the kernel makes for a new child: its controllers are its parent's subtree_control."""
        os.mkdir(path)
        enabled = _tokens(Path(path).parent / "cgroup.subtree_control")
        p = Path(path)
        (p / "cgroup.controllers").write_text(" ".join(enabled))
        (p / "cgroup.subtree_control").write_text("")
        (p / "cgroup.procs").write_text("")
        if "memory" in enabled:
            (p / "memory.max").write_text("max")
            (p / "memory.swap.max").write_text("max")

    @staticmethod
    def rmdir(path: str) -> bool:
        if not os.path.isdir(path) or Path(path, "cgroup.procs").read_text().strip():
            return False
        shutil.rmtree(path)
        return True

    def children(self, rel: str = "/") -> list[str]:
        return sorted(n for n in os.listdir(self.root / rel.lstrip("/")) if n.startswith(cgroups.PREFIX))


def _tokens(path: Path) -> list[str]:
    return [t.lstrip("+") for t in path.read_text().split() if not t.startswith("-")]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    t = Tree(tmp_path / "cgroup")
    monkeypatch.setattr(cgroups, "V2_ROOTS", (str(t.root),))
    monkeypatch.setattr(cgroups, "V1_ROOT", str(tmp_path / "no-v1"))
    monkeypatch.setattr(cgroups, "own_cgroup", lambda version: OWN)
    monkeypatch.setattr(cgroups, "_make_dir", t.mkdir)
    monkeypatch.setattr(cgroups, "remove_cgroup", t.rmdir)
    return t


def _h200(tree: Tree, root_subtree: str = "memory pids", api_subtree: str = "") -> None:
    (tree.root / "cgroup.subtree_control").write_text(root_subtree)
    tree.level("/process_api", api_subtree)
    tree.level(OWN, "", procs="4242\n4243")


def test_the_h200_shape_makes_the_session_cgroup_at_the_root(tree):
    """Own cgroup /process_api/<id> with an empty subtree_control, the root's holding memory (H200, 2026-12-04)."""
    _h200(tree)
    with MemoryPressure(512) as p:
        lim = p.limit
        assert lim.method == "cgroup-v2" and os.path.dirname(lim.path) == str(tree.root)
        assert Path(lim.path, "memory.max").read_text() == str(512 * MiB)
        assert lim.worker_json() == {"path": lim.path, "version": 2}
        record = lim.record_json()["cgroup"]
        assert record["made_at"] == "/" and record["own"] == OWN and record["enabled"] == ""
        assert [r.split(":")[0] for r in record["passed"]] == [OWN, "/process_api"]
        assert "no-internal-process" in record["passed"][0]
        assert "made under the root /" in lim.detail
        assert f"{OWN}: memory not in its cgroup.subtree_control" in lim.detail
        assert "\n" not in lim.detail
    assert tree.children() == []  # reaped as before: removed when the session ends


def test_the_nearest_ancestor_that_holds_memory_is_taken_before_the_root(tree):
    _h200(tree, api_subtree="memory")
    with MemoryPressure(64) as p:
        assert os.path.dirname(p.limit.path) == str(tree.root / "process_api")
        assert p.limit.cgroup.made_at == "/process_api" and "made under the ancestor /process_api" in p.limit.detail
        assert tree.children() == []


def test_the_own_cgroup_is_first_where_it_can_hold_one(tree, monkeypatch):
    """A container whose own cgroup is its namespace's root ("/"): the child is made there, as before."""
    monkeypatch.setattr(cgroups, "own_cgroup", lambda version: "/")
    (tree.root / "cgroup.subtree_control").write_text("memory")
    with MemoryPressure(64) as p:
        assert p.limit.cgroup.made_at == "/" and p.limit.cgroup.passed == ()
        assert "made under this process's own cgroup /" in p.limit.detail


def test_memory_is_enabled_at_the_root_when_no_level_holds_it(tree):
    """Delegation: the root may enable a controller for its children while it holds processes; no other
    level is changed, and no process is moved."""
    _h200(tree, root_subtree="")
    with MemoryPressure(64) as p:
        assert (tree.root / "cgroup.subtree_control").read_text() == "+memory"
        assert p.limit.cgroup.enabled == "/" and "+memory written to /'s cgroup.subtree_control" in p.limit.detail
        assert Path(p.limit.path, "memory.max").read_text() == str(64 * MiB)
    assert (tree.root / "process_api" / "cgroup.subtree_control").read_text() == ""
    assert (tree.root / OWN.lstrip("/") / "cgroup.procs").read_text() == "4242\n4243"


def test_a_tree_without_memory_anywhere_is_one_line_naming_each_level(tree, monkeypatch):
    (tree.root / "cgroup.controllers").write_text("cpu pids")
    monkeypatch.setattr(pressure, "meminfo", lambda key: 10 * MiB)  # and no room for a balloon
    with pytest.raises(ParamError) as err:
        MemoryPressure(64).__enter__()
    assert "\n" not in str(err.value) and "has no memory controller" in str(err.value)
    (tree.root / "cgroup.controllers").write_text("cpu memory pids")
    _h200(tree, root_subtree="pids")
    monkeypatch.setattr(cgroups, "_write", _refuse_subtree_control(cgroups._write))
    with pytest.raises(ParamError) as err:
        MemoryPressure(64, "cgroup").__enter__()
    message = str(err.value)
    assert "\n" not in message and f"{OWN}: memory not" in message and "/process_api: memory not" in message
    assert "/: +memory refused" in message and tree.children() == []


def _refuse_subtree_control(write):
    def refuse(path: str, text: str) -> None:
        if path.endswith("cgroup.subtree_control"):
            raise PermissionError(13, "Permission denied")  # root bypasses file modes: refused as the kernel would
        write(path, text)
    return refuse


def test_stale_cgroups_of_gone_runners_are_reaped_where_the_new_one_is_made(tree):
    from workbench.ledger.owner import current_owner

    _h200(tree)
    me = current_owner()
    stale = tree.level(f"/{cgroups.PREFIX}{me.pid}-{me.start_ticks + 1}-abcdef")  # a reused pid: its runner is gone
    live = tree.level(f"/{cgroups.PREFIX}{me.pid}-{me.start_ticks}-fedcba")  # this runner's own: kept
    with MemoryPressure(64) as p:
        assert str(stale) in p.limit.cgroup.reaped and "removed 1 stale cgroup(s)" in p.limit.detail
        assert not stale.exists() and live.exists()
