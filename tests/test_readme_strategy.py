"""The manual's "Adding a strategy" (docs/strategies.md) works as written: its code block and registry
line become a temporary strategy (registered through ``$WORKBENCH_STRATEGIES``, the package's registry
file untouched), and the shared strategy suite runs on it — so the guide cannot drift from what the
suite accepts."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from guides import ROOT, section as guide_section

from workbench.settings import defaults


def readme_strategy() -> tuple[str, str, str, str]:
    """(code, name, module path, class) from the "Adding a strategy" section, wherever the README or a
    guide has it."""
    _, section = guide_section("Adding a strategy")
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    lines = re.findall(r'`("[\w-]+": \("[\w.]+:\w+", ""\),)`', section)
    assert len(lines) == 1, f"the section must show exactly one registry line, found {lines}"
    ((name, (target, hint)),) = ast.literal_eval("{" + lines[0] + "}").items()
    module, _, cls = target.partition(":")
    written = re.search(r"Write `([\w/]+\.py)`", section).group(1)
    assert module == written[:-3].replace("/", "."), f"the registry line names {module}, the text {written}"
    assert re.search(rf"^class {cls}\(", code, re.M), f"{cls} is not defined in the code block"
    assert "STRATEGIES" in section and hint == ""
    return code, name, module, cls


@pytest.fixture
def template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The README's strategy importable as a module of its own and registered under its name, here and in
    every process started from here (workers, a pytest run)."""
    code, name, _, cls = readme_strategy()
    module = f"readme_strategy_{name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    with defaults.set_extra_strategies({name: f"{module}:{cls}"}):
        yield name


def test_the_registry_line_and_code_block_agree(template: str) -> None:
    from workbench.strategies import STRATEGIES, get_strategy

    cls = get_strategy(template)
    assert cls.name == template and cls.summary and template not in STRATEGIES.registered  # file untouched
    assert cls.available().ok and "evict" in cls.param_defaults()


@pytest.mark.timeout(600)
def test_the_shared_suite_passes_on_the_readme_template(template: str) -> None:
    # The suite parametrizes over every registered name, so in a fresh pytest that sees the
    # template registered, every one of its cases (formats, layouts, cache states, odd offsets, bf16
    # and mixed dtypes, an empty file, the UMA policy, "every strategy states what engaged") runs on it.
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           str(ROOT / "tests" / "test_strategies_suite.py"), "-k", template],
                          capture_output=True, text=True, cwd=ROOT, timeout=580)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail
    passed = int(re.search(r"(\d+) passed", tail).group(1))
    assert passed >= 15 and "failed" not in tail, tail  # 18 cases a strategy (fewer where a state is unreachable)


def test_the_template_loads_a_sharded_model_byte_exact(template: str, sharded_model) -> None:
    from workbench.measure.run.verify import verify_placements
    from workbench.strategies import get_strategy
    from workbench.upload import open_device

    for fmt in ("gguf", "safetensors"):
        index = sharded_model(fmt, "moe")
        device = open_device("host")
        try:
            result = get_strategy(template)().load(index, device)
            report = verify_placements(index, device, result.placements)
            assert report.ok and report.checked == len(index) and len(index.files) > 1
            n = len(index.files)
            assert [str(e) for e in result.engaged] == [f"prefetch: 0/{n} files — INERT (what it did, over {n} files)"]
        finally:
            device.close()


def test_a_worker_measures_the_template(template: str, tmp_path: Path, synth_model, isolated_cache) -> None:
    from workbench.ledger import Ledger
    from workbench.measure import RunConfig, measure

    index = synth_model("gguf", "dense")
    with Ledger(tmp_path / "l.sqlite") as ledger:
        (result,) = measure([RunConfig(index.path, template)], runs=1, cache="warm", ledger=ledger,
                            lock_dir=tmp_path / "locks")
    (run,) = result.runs
    assert run.ok and run.verified is True and run.engaged == ("prefetch: 0/1 files — INERT (what it did)",), run.error
