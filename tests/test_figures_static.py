"""Figures outside JupyterLab: static PNG + SVG through kaleido, in reports, exports and notebooks;
log ticks a reader can tell apart; heat maps one panel per file."""
from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pytest
from click.testing import CliRunner

from workbench.settings import defaults
from workbench.cli import main
from workbench.ledger import Ledger
from workbench.ledger.figures.campaign import gbps_vs_ceilings, h2d_lines
from workbench.ledger.figures.heatmap import log_ticks, threads_chunk_heatmap
from workbench.ledger.figures.static import mime_bundle, render_static

from ledger_helpers import record_attempt

pytestmark = pytest.mark.static_figures

@pytest.fixture()
def browser() -> str:
    """The Chrome/Chromium that draws the images (looked up when the test runs, after the marker's env)."""
    path = defaults.browser_path()
    if not path:
        pytest.skip("no Chrome/Chromium (apt-get install chromium)")
    return path


def assert_png(data: bytes) -> None:
    """A PNG: the signature, then an IHDR chunk with a real size."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert kind == b"IHDR" and length == 13 and width > 100 and height > 100
    assert data[-8:-4] == b"IEND"


def assert_svg(text: str) -> None:
    root = ET.fromstring(text)  # well-formed XML, or this raises
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


# -- log axes and heat maps ---------------------------------------------------------------------------


def test_log_ticks_write_every_tick_whole():
    ticks = log_ticks(0.1, 30)
    assert ticks["ticktext"] == ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20"]
    assert ticks["tickvals"][1] == pytest.approx(0.2) and ticks["tickvals"][-1] == pytest.approx(20)
    assert len(set(ticks["ticktext"])) == len(ticks["ticktext"])
    assert log_ticks(2500, 1.2e6)["ticktext"] == ["5,000", "10,000", "20,000", "50,000", "100,000", "200,000",
                                                  "500,000", "1e+6"]
    assert log_ticks(3, 4)["ticktext"] == ["3", "4"]  # inside one step: its ends
    assert log_ticks(0, 4) == {}


def test_gbps_figure_on_a_log_axis_labels_its_ticks():
    attempts = pd.DataFrame({"id": ["a", "b"], "label": ["pread", "ring"], "strategy": ["pread", "ring"],
                             "cache": ["warm", "warm"], "gbps": [0.3, 2.5]})
    walls = pd.DataFrame({"host": ["h"], "name": ["memcpy"], "gbps": [40.0]})
    axis = gbps_vs_ceilings(attempts, walls).layout.yaxis
    assert axis.type == "log"
    assert {"0.2", "2", "20"} <= set(axis.ticktext) and len(axis.ticktext) == len(axis.tickvals)


def test_h2d_sizes_are_every_tick():
    frame = pd.DataFrame({"path": ["heap"] * 3, "size": [1, 2, 3], "size_mib": [0.25, 2.0, 64.0],
                          "gbps": [1.0, 2.0, 3.0], "device": ["host"] * 3})
    axis = h2d_lines(frame).layout.xaxis
    assert axis.type == "log" and list(axis.ticktext) == ["0.25", "2", "64"]


def test_heat_map_draws_one_panel_per_file_never_an_average():
    params = [{"threads": 1, "chunk_mib": 4}, {"threads": 2, "chunk_mib": 4}] * 2
    attempts = pd.DataFrame({
        "id": ["a", "b", "c", "d"], "strategy": ["lanes"] * 4, "cache": ["warm"] * 4, "gbps": [1.0, 2.0, 10.0, 20.0],
        "params": params, "file_path": ["/m/small.gguf"] * 2 + ["/m/big.gguf"] * 2,
        "file_hash": ["xxh3_128:aaaa11111111"] * 2 + ["xxh3_128:bbbb22222222"] * 2})
    fig = threads_chunk_heatmap(attempts)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["small · lanes · warm", "big · lanes · warm"]  # the model names every table uses
    assert [list(t.z[:, 0]) for t in fig.data] == [[1.0, 2.0], [10.0, 20.0]]  # nothing averaged across files
    assert fig.layout.xaxis.title.text == "chunk (MiB)" and fig.layout.yaxis2.title.text == "threads"
    # The same configuration twice on one file: its latest attempt, and the title says so.
    again = pd.concat([attempts, attempts.iloc[[0]].assign(id="e", gbps=3.0)], ignore_index=True)
    fig = threads_chunk_heatmap(again)
    assert fig.data[0].z[0, 0] == 3.0 and "latest attempt per cell" in fig.layout.title.text
    # Two files with one name are told apart by their hash.
    clash = attempts.assign(file_path="/other/m.gguf")
    assert {a.text for a in threads_chunk_heatmap(clash).layout.annotations} == {
        "m [11111111] · lanes · warm", "m [22222222] · lanes · warm"}


# -- static images ----------------------------------------------------------------------------------


def test_without_a_browser_no_image_and_one_line_why(monkeypatch):
    fig = go.Figure(go.Bar(x=[1], y=[2]), layout=dict(title="t"))
    with defaults.set_browser_path("none"):
        drawn = render_static({"a": fig})
    assert drawn.images == {} and "\n" not in drawn.unavailable and "WORKBENCH_BROWSER=none" in drawn.unavailable
    with defaults.set_browser_path("/nonexistent/chromium"):
        drawn = render_static({"a": fig})
    assert drawn.images == {} and "/nonexistent/chromium" in drawn.unavailable
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(defaults, "BROWSER_CANDIDATES", ("/nonexistent/chromium",))
    assert defaults.browser_path() == ""
    assert "apt-get install chromium" in render_static({"a": fig}).unavailable
    bundle = mime_bundle(fig, None)  # the interactive figure still goes out
    assert set(bundle) == {"application/vnd.plotly.v1+json", "text/plain"}


def test_render_static_draws_valid_png_and_svg(browser):
    figs = {"bars": go.Figure(go.Bar(x=["a", "b"], y=[1, 20]), layout=dict(title="Bars", height=300)),
            "line": go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]))}
    drawn = render_static(figs)
    assert drawn.unavailable == "" and set(drawn.images) == {"bars", "line"}
    for image in drawn.images.values():
        assert_png(image.png)
        assert_svg(image.svg)
    assert drawn.images["bars"].title == "Bars" and struct.unpack(">II", drawn.images["bars"].png[16:24])[1] == 300
    bundle = mime_bundle(figs["bars"], drawn.images["bars"])
    assert {"image/png", "image/svg+xml", "application/vnd.plotly.v1+json"} <= set(bundle)


@pytest.fixture()
def small_ledger(tmp_path: Path) -> Path:
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        base = record_attempt(led, "pread", [0.010, 0.011, 0.012, 0.010, 0.011], campaign="figs")
        record_attempt(led, "mmap", [0.008, 0.009, 0.008, 0.009, 0.008], campaign="figs", baseline=base)
    return path


def test_report_writes_and_links_static_figures(browser, small_ledger, tmp_path):
    from workbench.ledger.report import write_report

    with Ledger(small_ledger) as led:
        paths = write_report(led, "figs", tmp_path / "r")
    assert paths.images_note == "" and len(paths.images) == 2 * len(paths.figures)
    md = paths.markdown.read_text()
    for key in paths.figures:
        png, svg = tmp_path / "r" / "figures" / f"{key}.png", tmp_path / "r" / "figures" / f"{key}.svg"
        assert_png(png.read_bytes())
        assert_svg(svg.read_text())
        assert f"(figures/{key}.png)" in md and f"(figures/{key}.svg)" in md
    assert md.count("![") == len(paths.figures)


def test_report_without_a_browser_says_so_and_keeps_the_interactive_page(small_ledger, tmp_path):
    from workbench.ledger.report import write_report

    with defaults.set_browser_path("none"), Ledger(small_ledger) as led:
        paths = write_report(led, "figs", tmp_path / "r")
    assert paths.images == () and "static images not drawn" in paths.images_note
    md = paths.markdown.read_text()
    assert "static images not drawn" in md and "![" not in md
    assert all(f'id="figure-{key}"' in paths.html.read_text() for key in paths.figures)


def test_export_figures_writes_a_campaigns_images(browser, small_ledger, tmp_path):
    out = tmp_path / "figs"
    result = CliRunner().invoke(main, ["ledger", "export", "--ledger", str(small_ledger), "--campaign", "figs",
                                       "--figures", str(out)])
    assert result.exit_code == 0, result.output
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) >= 4 and len(pngs) == len(list(out.glob("*.svg")))
    assert f"wrote {len(pngs)} figures as PNG and SVG" in result.output
    assert_png(pngs[0].read_bytes())
    assert (out / "figures.html").read_text().count("plotly.js v") == 1


def test_export_figures_needs_a_campaign_and_works_without_a_browser(small_ledger, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["ledger", "export", "--ledger", str(small_ledger), "--figures", str(tmp_path)])
    assert result.exit_code == 2 and "--campaign" in result.output
    with defaults.set_browser_path("none"):
        result = runner.invoke(main, ["ledger", "export", "--ledger", str(small_ledger), "--campaign", "figs",
                                      "--figures", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert "static images not drawn" in result.output and (tmp_path / "f" / "figures.html").is_file()
    assert list((tmp_path / "f").glob("*.png")) == []


def test_a_batch_notebooks_figures_go_out_with_their_images_or_one_line_why():
    from workbench.cli.notebooks.ui import with_static_images

    fig = go.Figure(go.Bar(x=[1], y=[2]), layout=dict(title="t"))
    with defaults.set_browser_path("none"):
        note, text, bundle = with_static_images(["before", fig])
    assert "static images not drawn" in note.data and text == "before"
    assert set(bundle._repr_mimebundle_()) == {"application/vnd.plotly.v1+json", "text/plain"}
    assert with_static_images(["only text"]) == ["only text"]  # no figure: no browser started


# -- hostile ledger text in static images (issue 24 §5) -----------------------------------------------

HOSTILE_LABELS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
                  '<a href="javascript:alert(1)">click</a>', "<b>bold</b> &amp; </text></svg><svg onload=alert(1)>",
                  "\x1b]52;c;cm0=\x07 rtl\u202eevil"]
_UNSAFE_TAGS = {"script", "foreignObject", "iframe", "object", "embed", "use", "a", "animate", "set"}


def _svg_problems(svg: str) -> list[str]:
    """What in an SVG could run, load or link anything: unsafe elements, event handlers, links (an
    embedded PNG — how plotly draws a heat map — is neither)."""
    problems = []
    for el in ET.fromstring(svg).iter():
        tag = el.tag.rpartition("}")[2]
        if tag in _UNSAFE_TAGS:
            problems.append(f"<{tag}>")
        for name, value in el.attrib.items():
            local = name.rpartition("}")[2].lower()
            linked = local == "href" and not value.startswith(("#", "data:image/png;base64,"))  # a heat map's pixels
            if local.startswith("on") or linked or "javascript:" in value:
                problems.append(f"<{tag} {local}={value[:40]!r}>")
    return problems


@pytest.fixture()
def hostile_figures_ledger(tmp_path: Path) -> Path:
    """A campaign whose labels, hypotheses, hosts and per-file residency names are hostile."""
    import json
    import sqlite3

    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        base = record_attempt(led, "pread", [0.010, 0.011, 0.012, 0.010, 0.011], campaign="figs")
        record_attempt(led, "mmap", [0.008, 0.009, 0.008, 0.009, 0.008], campaign="figs", baseline=base)
        record_attempt(led, "lanes", [0.009, 0.009, 0.010, 0.009, 0.008], campaign="figs", baseline=base)
    conn = sqlite3.connect(path)
    for i, (row_id,) in enumerate(conn.execute("SELECT id FROM attempts ORDER BY created").fetchall()):
        bad = HOSTILE_LABELS[i % len(HOSTILE_LABELS)]
        conn.execute("UPDATE attempts SET label = ?, hypothesis = ?, host = ?, file_path = ? WHERE id = ?",
                     (bad, bad, bad, f"/m/{bad}.safetensors", row_id))
    files = {f"{HOSTILE_LABELS[1]}-00001.safetensors": 0.0, f"{HOSTILE_LABELS[3]}-00002.safetensors": 1.0}
    conn.execute("UPDATE runs SET resident_files = ?", (json.dumps(files),))
    conn.commit()
    conn.close()
    return path


def test_static_figures_show_hostile_ledger_text_as_text(browser, hostile_figures_ledger, tmp_path):
    """Every image of a report and of ``export --figures`` on a hostile ledger: a well-formed SVG with
    no element that runs, loads or links anything, the labels drawn as their characters; the files
    written are the figures' own names in the directory asked for, and nothing else."""
    from workbench.ledger.report import write_report

    with Ledger(hostile_figures_ledger) as led:
        paths = write_report(led, "figs", tmp_path / "r")
    out = tmp_path / "f"
    result = CliRunner().invoke(main, ["ledger", "export", "--ledger", str(hostile_figures_ledger), "--campaign",
                                       "figs", "--figures", str(out)])
    assert result.exit_code == 0 and paths.images_note == "", (result.output, paths.images_note)
    assert "resident_files" in paths.figures  # the per-file figure, its file names hostile
    svgs = sorted((tmp_path / "r" / "figures").glob("*.svg")) + sorted(out.glob("*.svg"))
    assert len(svgs) == 2 * len(paths.figures)
    drawn = ""
    for svg in svgs:
        text = svg.read_text()
        assert not _svg_problems(text), (svg.name, _svg_problems(text))
        drawn += "".join(ET.fromstring(text).itertext())
    for png in (tmp_path / "r" / "figures").glob("*.png"):
        assert_png(png.read_bytes())
    assert HOSTILE_LABELS[1] in drawn and "</text></svg><svg onload=alert(1)>" in drawn  # shown, as text
    expected = {f"{k}.{ext}" for k in paths.figures for ext in ("png", "svg")}
    assert {p.name for p in (tmp_path / "r" / "figures").iterdir()} == expected
    assert {p.name for p in out.iterdir()} == expected | {"figures.html"}
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob("*.svg"))
