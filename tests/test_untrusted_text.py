"""Issue 19, class 5: text from a ledger is untrusted wherever it is shown. One cleaner per output kind
(terminal, HTML — plotly's labels too —, Markdown) in ``workbench/output/untrusted.py``; every renderer uses
it: ``ledger list``/``show``, the CLI's tables, the PR Markdown, the report, and notebooks 01–06."""
from __future__ import annotations

import json
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from ledger_helpers import fill_ledger
from workbench.cli import main
from workbench.ledger import Ledger
from workbench.output.untrusted import for_html, for_markdown, for_terminal

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "# Heading injected",
    "![tracker](https://evil.example/p.png)",
    "[click](javascript:alert(1))",
    "a | b | c",
    "split\rrow\nhere",
    "**bold** _it_ `code` ~~gone~~ $x^2$",
    "&lt;b&gt; entity",
    "\x1b]52;c;cm0gLXJmIH4=\x07clipboard",
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\x1b[2J\x1b[31mred\x9b0m",
    "rtl\u202eevil\u200b",
    "1. list",
    "> quote",
    "- item",
]
TERMINAL_BAD = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


class Tags(HTMLParser):
    """Every start tag and its attributes, and the text of each script."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)

    def handle_endtag(self, tag):
        self._in_script = False


def tags(html: str) -> Tags:
    parser = Tags()
    parser.feed(html)
    return parser


def markdown_html(text: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_for_terminal_leaves_one_printable_line(text):
    out = for_terminal(text)
    assert not TERMINAL_BAD.search(out) and "\n" not in out and "\r" not in out, repr(out)


@pytest.mark.parametrize("text", HOSTILE)
def test_for_html_leaves_text_only(text):
    found = tags(f"<p>{for_html(text)}</p><a title=\"{for_html(text)}\">x</a>")
    assert [t for t, _ in found.tags] == ["p", "a"] and list(found.tags[1][1]) == ["title"]


@pytest.mark.parametrize("text", HOSTILE)
def test_for_markdown_renders_as_the_same_characters_and_nothing_else(text):
    rendered = markdown_html(f"{for_markdown(text)}\n")
    assert [t for t, _ in tags(rendered).tags] == ["p"], rendered
    shown = re.sub(r"<[^>]+>", "", rendered).strip()
    import html

    expected = for_terminal(re.sub(r"\r\n|[\r\n]", " ", text))  # line breaks become spaces, controls escaped
    # the zero-width spaces that break autolinks are the only characters added (an input's own is escaped)
    assert html.unescape(shown).replace("\u200b", "") == expected


@pytest.mark.parametrize("text", ["@octocat please look", "cc @org/team", "mail me@evil.example",
                                  "https://evil.example/x?y=1", "HTTP://EVIL.example", "www.evil.example/p",
                                  "(www.evil.example)", "*https://a.example*"])
def test_for_markdown_leaves_nothing_github_would_link_or_mention(text):
    shown = html_text(markdown_html(f"{for_markdown(text)}\n"))
    assert shown.replace("\u200b", "") == text  # the same characters ...
    # ... and none of the sequences GitHub's autolinker and @mentions start from: an @ before a name,
    # a scheme's :// after its letters, a www. at a word's start
    assert not re.search(r"@\w|\w://|(?<!\w)www\.", shown, re.I), shown


SHA = "a5c3785ed8d6a35868bc169f07e40e889087fd2e"


@pytest.mark.parametrize("text", ["fixes #12", "#1", "see GH-12 and gh-7", "octo-org/octo-repo#1 is broken",
                                  "org/repo#123456", f"commit {SHA}", f"short {SHA[:7]} and {SHA[:12].upper()}",
                                  f"org/repo@{SHA}", f"user@{SHA[:9]}", f"({SHA[:8]})", "#12: 4096-byte pages"])
def test_for_markdown_leaves_no_issue_or_commit_reference(text):
    """``#12``, ``GH-12``, ``org/repo#1`` (which would put a cross-reference on another repository's
    issue) and SHAs of 7–40 hex digits pass through as the same characters, no longer references."""
    shown = html_text(markdown_html(f"{for_markdown(text)}\n"))
    assert shown.replace("\u200b", "") == text
    assert not re.search(r"#[0-9]|(?<![A-Za-z0-9])gh-[0-9]|(?<![A-Za-z0-9])[0-9a-f]{7,40}(?![A-Za-z0-9])",
                         shown, re.I), shown


def test_for_markdown_leaves_ordinary_words_and_numbers_alone():
    text = "layer 12 of 4096 · model-00001-of-00002.safetensors · C# and F# · 3.00 MiB · 2026-12-03 10:20"
    assert for_markdown(text) == text


def html_text(rendered: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip()


def test_for_markdown_keeps_a_table_cell_in_its_cell():
    row = "| " + " | ".join(for_markdown(t) for t in HOSTILE) + " |"
    table = "| " + " | ".join(f"c{i}" for i in range(len(HOSTILE))) + " |\n|" + "---|" * len(HOSTILE) + "\n" + row
    rendered = markdown_html(table + "\n")
    assert rendered.count("<tr>") == 2 and rendered.count("<td>") == len(HOSTILE), rendered
    assert {t for t, _ in tags(rendered).tags} <= {"table", "thead", "tbody", "tr", "th", "td"}


@pytest.fixture
def hostile_ledger(tmp_path: Path) -> tuple[Path, str]:
    """A ledger whose every text field carries hostile text (as a merged ledger could)."""
    path = tmp_path / "l.sqlite"
    fill_ledger(path)
    campaign = "<img src=x onerror=alert(1)> \x1b[31m"
    conn = sqlite3.connect(path)
    conn.execute("UPDATE campaigns SET name = ?", (campaign,))
    for i, (row_id,) in enumerate(conn.execute("SELECT id FROM attempts ORDER BY created").fetchall()):
        bad = HOSTILE[i % len(HOSTILE)] + " " + HOSTILE[(i + 5) % len(HOSTILE)]
        conn.execute("UPDATE attempts SET label = ?, hypothesis = ?, notes = ?, host = ?, verdict_reason = ?,"
                     " file_path = ? WHERE id = ?", (bad, "\n".join(HOSTILE), "\r".join(HOSTILE), bad, bad,
                                                     "/m/" + HOSTILE[1] + ".gguf", row_id))
    conn.execute("UPDATE runs SET error = ? WHERE error IS NOT NULL", ("\n".join(HOSTILE),))
    conn.execute("UPDATE runs SET engaged = ?", ('["zero_copy: 3/3 tensors \\u001b]52;c;eA==\\u0007 <b>ON</b>"]',))
    # a model of several files whose names are hostile: notebook 01's per-file table and heat map
    conn.execute("UPDATE runs SET resident_files = ?", (json.dumps({HOSTILE[1] + ".safetensors": 0.0,
                                                                    HOSTILE[3] + "-2.safetensors": 1.0}),))
    conn.commit()
    conn.close()
    return path, campaign


def test_ledger_list_and_show_print_no_escape_sequence(hostile_ledger):
    path, _ = hostile_ledger
    listed = CliRunner().invoke(main, ["ledger", "--ledger", str(path), "list"])
    assert listed.exit_code == 0 and not TERMINAL_BAD.search(listed.output.replace("\n", "")), listed.output
    assert len(listed.output.strip().splitlines()) == 4  # a header and three attempts, one line each
    with Ledger(path, readonly=True) as led:
        ids = list(led.attempts()["id"])
    for attempt in ids:
        shown = CliRunner().invoke(main, ["ledger", "--ledger", str(path), "show", attempt[:8]])
        assert shown.exit_code == 0 and not TERMINAL_BAD.search(shown.output.replace("\n", "")), shown.output


@pytest.mark.static_figures  # the report's own figure links beside the ledger's text
def test_the_pr_table_and_report_render_no_markup_from_the_ledger(hostile_ledger, tmp_path):
    from workbench.ledger import markdown_table
    from workbench.ledger.report import write_report

    path, campaign = hostile_ledger
    with Ledger(path, readonly=True) as led:
        table = markdown_table(led, campaign, all_attempts=True)
        paths = write_report(led, campaign, tmp_path / "report")
    for text in (table, paths.markdown.read_text()):
        found = tags(markdown_html(text))
        assert {t for t, _ in found.tags} <= {"p", "strong", "em", "code", "table", "thead", "tbody", "tr", "th",
                                            "td", "h1", "h2", "ol", "li", "ul", "img", "a"}, found.tags
        # the only images and links are the report's own figure files, never one the ledger's text made
        links = [dict(attrs).get("src") or dict(attrs).get("href") for t, attrs in found.tags if t in ("img", "a")]
        assert all(re.fullmatch(r"figures/[a-z0-9_]+\.(png|svg)", str(link)) for link in links), links
        assert not found.scripts
    header, rule, *rows = [line for line in table.splitlines() if line.startswith("|")]
    cells = len(re.split(r"(?<!\\)\|", header))
    assert len(rows) == 3 and all(len(re.split(r"(?<!\\)\|", r)) == cells for r in rows)  # no row split
    assert sum(1 for line in paths.markdown.read_text().splitlines() if line.startswith("#")) == 3  # ours only
    page = tags(paths.html.read_text())
    assert not [t for t, _ in page.tags if t in ("img", "iframe", "object", "embed")]
    assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
    assert not [s for s in page.scripts if "alert(1)" in s and "<img" in s]  # in figure data only escaped


def test_notebook_outputs_show_ledger_text_as_text(hostile_ledger, tmp_path):
    from workbench.cli.notebooks.actions import show_attempts
    from workbench.cli.notebooks.report import build_report
    from workbench.cli.notebooks.ui import results_html

    path, campaign = hostile_ledger
    with Ledger(path, readonly=True) as led:
        ids = list(led.attempts()["id"])
    shown = show_attempts(path, campaign, ids)  # notebook 01's output
    built = build_report(path, campaign, str(tmp_path / "r"))  # notebook 05's output
    for item in [*shown, *built]:
        if hasattr(item, "data") and isinstance(item.data, str):
            html = markdown_html(item.data) if type(item).__name__ == "Markdown" else item.data
            found = tags(html)
            assert not [t for t, _ in found.tags if t in ("img", "script", "h1", "a")], (type(item), found.tags)
        elif hasattr(item, "to_plotly_json"):
            names = [str(t.get("name")) for t in item.to_plotly_json()["data"]]
            xs = [str(x) for t in item.to_plotly_json()["data"] for x in (list(t["x"]) if t.get("x") is not None else [])]
            ys = [str(y) for t in item.to_plotly_json()["data"] if t.get("type") == "heatmap" for y in t["y"]]
            assert not any("<" in n for n in names + xs + ys), names + xs + ys
    assert any("wb-resident-files" in str(getattr(i, "data", "")) for i in shown)  # the hostile names were shown
    import pandas as pd

    frame = pd.DataFrame({"<b>col</b>": ["<img src=x onerror=alert(1)>"], "engaged": [("<i>x</i>",)]})
    assert [t for t, _ in tags(results_html(frame).data).tags] == ["div", "table", "thead", "tr", "th", "th",
                                                                   "tbody", "tr", "td", "td"]


def test_the_cli_error_line_and_tables_escape_what_they_quote(tmp_path):
    from workbench.measure.run.tables import format_table

    text = format_table(("change",), [("\x1b]52;c;eA==\x07 label\rsplit",)])
    assert not TERMINAL_BAD.search(text.replace("\n", "")) and len(text.splitlines()) == 3
    path = tmp_path / "l.sqlite"
    fill_ledger(path)
    out = CliRunner().invoke(main, ["ledger", "--ledger", str(path), "show", "zz\x1b[2J\nzzzz"])
    assert out.exit_code == 2 and "\x1b" not in out.output and out.output.count("\n") == 1, out.output


def test_notebook_06s_output_shows_ledger_text_as_text(hostile_ledger, tmp_path):
    # Notebook 06 (engine A/B) shows the campaign's attempts, verdicts and figures from the ledger: a
    # merged ledger's labels, campaign name and file names must come out as text there too.
    from workbench.cli.notebooks.engines import show_engine_ab
    from workbench.measure.run.attempt import AttemptResult
    from workbench.records import AttemptStats, RunConfig

    path, campaign = hostile_ledger
    with Ledger(path, readonly=True) as led:
        rows = led.attempts(campaign)
    stats = AttemptStats(5, 0, 1.0, 0.9, 1.1, 5.0, 2.0, stable=True)
    results = [AttemptResult(row["id"], RunConfig(row["file_path"], "external"), "warm", (), stats,
                             None if i == 0 else rows["id"][0], None if i == 0 else 1.1,
                             "baseline" if i == 0 else "faster", label=row["label"], ci_low=1.05, ci_high=1.2)
               for i, (_, row) in enumerate(rows.iterrows())]
    shown = show_engine_ab(path, campaign, results, out_dir=str(tmp_path / "out"))
    assert len(shown) == 6
    drawn: list[bool] = []
    for item in shown:
        if hasattr(item, "to_plotly_json"):
            data = item.to_plotly_json()["data"]
            texts = [str(t.get("name")) for t in data] + [str(x) for t in data if t.get("x") is not None
                                                          for x in list(t["x"])]
            assert not any("<" in t for t in texts), texts
            drawn.append(any("&lt;" in t for t in texts))  # the hostile labels were drawn, escaped
        else:
            found = tags(item.data)
            assert not [t for t, _ in found.tags if t in ("img", "script", "a", "iframe")], found.tags
            assert not [a for _, attrs in found.tags for a in attrs if a.startswith("on")]
            assert "\x1b" not in item.data
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown[0].data  # the campaign name, shown as text
    assert drawn and any(drawn)
