"""The interactive path in a real browser: JupyterLab on loopback, Debian's Chromium driven by Playwright.

Opens 01_load_sweep.ipynb and 06_engine_ab.ipynb, runs all cells, sets the runs control, presses the
panel's Run button and waits for the results table, a plotly figure and each notebook's own results; the
same for 03_expert_slices and 04_long_session with their controls set to tiny sizes. A screenshot of each
goes to test-artifacts/. No browser is ever downloaded: Playwright drives /usr/bin/chromium
(``apt-get install chromium``; .ci/run does it).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from workbench.ledger import Ledger

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]

if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"{CHROMIUM} missing: install Debian's chromium (apt-get install -y chromium; .ci/run does)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the [dev] extra) is not installed")


@pytest.fixture()
def lab(tmp_path: Path):
    """JupyterLab on 127.0.0.1 with a token, over a copy of notebooks/, writing only under tmp_path (one
    per test: a server shared by the module reopened the last test's notebook beside the next one, and
    its hidden widgets matched the next test's locators). The server picks its port (``port=0``: the
    kernel hands out a free one, so parallel runs never collide) and says which in its runtime file."""
    tmp = tmp_path
    root = tmp / "lab"
    shutil.copytree(ROOT / "notebooks", root)
    token = secrets.token_hex(16)
    env = {**os.environ, "WORKBENCH_DATA": str(tmp / "data"), "WORKBENCH_LEDGER": str(tmp / "ledger.sqlite"),
           "WORKBENCH_LOCK_DIR": str(tmp / "locks"), "JUPYTER_CONFIG_DIR": str(tmp / "jcfg"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "jrt"), "IPYTHONDIR": str(tmp / "ipy")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.open_browser=False",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.workspaces_dir={tmp / 'ws'}", "--LabApp.news_url=None"]
    if os.geteuid() == 0:  # CI containers run as root; the server refuses that unless told
        cmd.append("--allow-root")
    log = (tmp / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = _wait_ready(proc, tmp / "jrt" / f"jpserver-{proc.pid}.json", token, tmp / "lab.log")
        yield {"base": base, "token": token, "ledger": tmp / "ledger.sqlite", "log": tmp / "lab.log"}
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait_ready(proc: subprocess.Popen, info: Path, token: str, log: Path, timeout: float = 90) -> str:
    """The server's base URL once its runtime file names its port and /api/status answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            base = f"http://127.0.0.1:{json.loads(info.read_text())['port']}"
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as reply:
                if reply.status == 200:
                    return base
        except (OSError, ValueError, KeyError):  # no runtime file yet, half written, or not listening yet
            time.sleep(0.3)
    raise RuntimeError(f"jupyter lab not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def test_load_sweep_notebook_runs_from_the_run_button(lab, tmp_path):
    def check(page) -> None:
        sync_api.expect(page.locator(".wb-output .wb-results table")).to_contain_text("pread · demo-dense-32MiB")

    _in_browser(tmp_path, lambda page: _drive(page, lab, "01_load_sweep", runs=2, check=check))
    with Ledger(lab["ledger"]) as ledger:
        attempts = ledger.attempts("notebook-load-sweep")
    # The defaults: pread, mmap, warmer × threads {2, 4}, cold and warm; runs as set in the browser.
    assert len(attempts) == 8 and set(attempts["n"]) == {2}


def test_engine_ab_notebook_runs_from_the_run_button(lab, tmp_path):
    def check(page) -> None:
        expect = sync_api.expect
        expect(page.locator(".wb-output .wb-verdict")).to_contain_text("--read mmap vs --read heap (warm)")
        expect(page.locator(".wb-output .wb-results table")).to_contain_text("demo_engine.py@")
        expect(page.locator(".wb-output .wb-phases")).to_contain_text("weights")

    _in_browser(tmp_path, lambda page: _drive(page, lab, "06_engine_ab", runs=3, check=check))
    with Ledger(lab["ledger"]) as ledger:
        attempts = ledger.attempts("notebook-engine-ab")
    # The defaults: the demo engine, heap reads against mmap, warm; runs as set in the browser.
    assert list(attempts["label"]) == ["--read heap", "--read mmap"] and set(attempts["n"]) == {3}
    assert set(attempts["kind"]) == {"external"} and attempts["binary_hash"].notna().all()


def test_expert_slices_notebook_runs_from_the_run_button(lab, tmp_path):
    values = {"size": "3MiB", "experts": "8", "runs": "1", "A/B rounds": "1", "A/B turns": "3", "tokens/turn": "2"}
    _in_browser(tmp_path, lambda page: _drive_panel(page, lab, "03_expert_slices", values,
                                                    ".wb-output .wb-placement table",
                                                    "Alignment 32: odirect-zero-copy INERT"))
    with Ledger(lab["ledger"]) as ledger:
        kinds = list(ledger.attempts("notebook-expert-slices")["kind"])
    assert kinds.count("strategy") == 16 and kinds.count("session") == 2  # 4 methods x 2 models x 2; the A/B


def test_long_session_notebook_runs_from_the_run_button(lab, tmp_path):
    values = {"turns": "3", "tokens/turn": "2", "single-shot tokens": "1", "cache MiB": "1", "k": "2",
              "A/B rounds": "1"}
    _in_browser(tmp_path, lambda page: _drive_panel(page, lab, "04_long_session", values,
                                                    ".wb-output .wb-sessions table", "long release=off"))
    with Ledger(lab["ledger"]) as ledger:
        assert list(ledger.attempts("notebook-long-session")["kind"]) == ["session"] * 6  # 4 + the A/B's 2 cells


def _drive_panel(page, lab, name: str, values: dict[str, str], table_selector: str, text: str) -> None:
    """Open notebook ``name``, run all cells, set the named controls, press Run, wait for its table."""
    expect = sync_api.expect
    page.goto(f"{lab['base']}/lab/tree/{name}.ipynb?token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    _settle_kernel(page)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    _settle_kernel(page)
    run = page.locator("button.wb-run")
    expect(run).to_be_visible(timeout=120_000)
    for label, value in values.items():
        box = page.locator(".widget-text", has=page.locator("label", has_text=re.compile(f"^{re.escape(label)}$")))
        box.locator("input").fill(value)
        box.locator("input").press("Enter")
    run.click()
    expect(page.locator(table_selector).first).to_be_visible(timeout=300_000)
    expect(page.locator(".wb-status")).to_contain_text("run 1 finished")
    expect(page.locator(".wb-output")).to_contain_text(text)
    figure = page.locator(".wb-output .js-plotly-plot").first
    expect(figure).to_be_visible(timeout=60_000)
    news = page.get_by_role("button", name="No", exact=True)  # the "Jupyter news?" toast hides the figure
    if news.count():
        news.first.click()
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"))


def _in_browser(tmp_path: Path, drive) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        # A fresh profile directory per test; the browser is Debian's, never a downloaded one.
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        try:
            drive(page)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "browser-failed.png"))
            raise
        finally:
            context.close()


def _drive(page, lab, name: str, runs: int, check) -> None:
    """Open notebook ``name``, run all cells, set the runs control, press Run, wait for the results;
    ``check(page)`` adds the notebook's own expectations before the screenshot."""
    expect = sync_api.expect
    page.goto(f"{lab['base']}/lab/tree/{name}.ipynb?token={lab['token']}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    _settle_kernel(page)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    _settle_kernel(page)

    run = page.locator("button.wb-run")
    expect(run).to_be_visible(timeout=120_000)
    status = page.locator(".wb-status, .widget-html-content i").first
    expect(status).to_contain_text("press Run", timeout=30_000)  # JupyterLab: it waits for the click
    box = page.locator(".widget-text", has=page.locator("label", has_text=re.compile(r"^runs$"))).locator("input")
    box.fill(str(runs))
    box.press("Enter")
    run.click()

    expect(page.locator(".wb-status")).to_contain_text("run 1", timeout=30_000)
    table = page.locator(".wb-output .wb-results table")
    expect(table).to_be_visible(timeout=300_000)
    figure = page.locator(".wb-output .js-plotly-plot").first
    expect(figure).to_be_visible(timeout=60_000)
    expect(page.locator(".wb-status")).to_contain_text("run 1 finished")
    check(page)
    news = page.get_by_role("button", name="No", exact=True)  # the "Jupyter news?" toast hides the figure
    if news.count():
        news.first.click()
    figure.scroll_into_view_if_needed()
    page.wait_for_timeout(500)  # let plotly finish its first draw before the picture
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"))


def _settle_kernel(page, timeout_s: float = 120) -> None:
    """Wait until the notebook's kernel is idle, accepting JupyterLab's kernel dialog if it asks.

    On a slow machine the kernel specs can arrive after the notebook opened, and JupyterLab then asks
    which kernel to start (preselecting the notebook's own, python3); a user would press Select.
    """
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    idle = page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if dialog.count() and dialog.is_visible():
            dialog.locator("button", has_text=re.compile(r"^Select$")).click()
        elif idle.count():
            return
        page.wait_for_timeout(250)
    raise AssertionError("the notebook's kernel never became idle")
