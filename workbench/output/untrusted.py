"""Text from a ledger is untrusted: labels, hypotheses, campaign and file names, notes and errors may
come from another machine's ledger. Every renderer cleans such text through the one helper for its kind
of output before showing it; nothing else here is needed to show text safely.

- :func:`for_terminal` — a terminal line (:func:`terminal_lines` for the several lines a command made): every control character (ESC, CSI, OSC: colour, clipboard
  writes, hyperlinks, cursor moves), line break, lone surrogate and invisible formatting character
  (bidirectional overrides, zero-width joiners) is shown escaped, so the text is one printable line;
- :func:`for_html` — HTML text or attribute value: ``& < > " '`` as entities (Python's ``html.escape``);
  the same for text plotly draws (its labels take a few HTML tags and entities);
- :func:`for_markdown` — Markdown inline text or a table cell (GitHub, JupyterLab): line breaks become
  spaces, and every character that could start Markdown (emphasis, code, links and images, raw HTML,
  entities, table pipes, math, a heading or list at the start) is backslash-escaped, so it reads as
  the same characters and nothing else; what GitHub links without markup (an @mention, which would
  notify a stranger when the PR is posted, an email, a bare ``https://`` or ``www.`` URL, an issue or
  commit reference: ``#12``, ``GH-12``, ``org/repo#12``, a SHA) gets a zero-width space that breaks
  it; :func:`for_markdown_code` is text inside a code span;
- :func:`for_csv` — a CSV cell: a leading ``'`` where a spreadsheet would read a formula.
"""
from __future__ import annotations

import html
import re
import unicodedata
from typing import Iterable

from workbench.errors import printable

_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")
# Inline Markdown: escapes, code, emphasis (``_`` only at a word's edge: snake_case stays as it is),
# links and images, raw HTML and autolinks, entities, table pipes, strikethrough, Jupyter's math.
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>&|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# What GitHub (and JupyterLab's GFM) turn into a live reference without any markup: an @mention (which
# notifies that user or team when a PR is posted), an email, a bare URL (``https://``, ``www.``). A
# zero-width space after the ``@`` and before ``://`` or the ``.`` of ``www.`` keeps the characters as
# they read and breaks the link.
_AUTOLINKED = re.compile(r"@|(?<=[A-Za-z0-9])(?=://)|(?<![A-Za-z0-9])(?i:www)(?=\.)")
_ZWSP = "&#8203;"
# What GitHub turns into a reference to an issue, pull request or commit: ``#12``, ``GH-12``, ``org/repo#12``
# (which also puts a "mentioned this" event on another repository's issue: the @mention by another route)
# and a commit SHA of 7 to 40 hex digits. A zero-width space after the ``#`` and the ``GH``, and inside a
# hex run every 6 characters, keeps the characters and breaks the reference. (A repository's own custom
# autolink prefixes, ``JIRA-123``, cannot be known here.)
_REFERENCES = re.compile(r"#(?=[0-9])|(?<![A-Za-z0-9])(?i:gh)(?=-[0-9])|(?<![A-Za-z0-9])[0-9A-Fa-f]{7,}(?![A-Za-z0-9])")
# What makes a line a heading, list, quote or setext underline when it starts one.
_MD_LINE_START = re.compile(r"^(\s*)([-+*](?=\s|$)|#{1,6}(?=\s|$)|>|=+(?=\s*$)|\d{1,9}(?=[.)](?:\s|$)))")


def for_terminal(text: object) -> str:
    """``text`` as one printable terminal line (see the module doc)."""
    return printable(str(text))


def terminal_lines(lines: Iterable[object]) -> str:
    """The lines a command made, each as :func:`for_terminal` shows it, joined by newlines: a name inside
    a line can neither break it (a newline in a file or tensor name forging a line of its own) nor drive
    the terminal (an OSC 52 clipboard write, colour codes) — the rule for every line the CLI prints."""
    return "\n".join(for_terminal(line) for line in lines)


def for_html(text: object) -> str:
    """``text`` escaped for HTML (text and quoted attribute values); controls and invisible formatting
    characters other than newline and tab shown escaped, as on a terminal."""
    return html.escape(_visible(str(text)), quote=True)


def for_plotly(text: object) -> str:
    """``text`` for a plotly label, legend or hover text: plotly draws a few HTML tags (links among them)
    and entities in them, so it is escaped as HTML."""
    return for_html(text)


def for_markdown(text: object) -> str:
    """``text`` as Markdown that renders as exactly these characters, on one line."""
    one_line = printable(_BREAKS.sub(" ", str(text)))
    escaped = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), one_line)
    escaped = _REFERENCES.sub(_break_reference, escaped)  # before any entity (``&#8203;``) is inserted
    escaped = _AUTOLINKED.sub(r"\g<0>" + _ZWSP, escaped)
    return _MD_LINE_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}" if not m.group(2)[0].isdigit()
                              else f"{m.group(1)}{m.group(2)}\\", escaped)


def _break_reference(m: re.Match) -> str:
    ref = m.group(0)
    if ref == "#" or ref.lower() == "gh":
        return ref + _ZWSP
    return _ZWSP.join(ref[i : i + 6] for i in range(0, len(ref), 6))


def for_markdown_code(text: object) -> str:
    """``text`` for inside a Markdown code span: no backtick (a code span cannot escape one), one line."""
    return printable(_BREAKS.sub(" ", str(text))).replace("`", "'")


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula (OWASP's list)
# What draws nothing before a cell's first visible character, by property: controls and format characters
# (zero-width spaces and joiners, BOM, bidi marks and overrides, soft hyphen, Mongolian vowel separator),
# surrogates, every kind of space and separator, and combining marks (U+034F, variation selectors: with
# nothing before them to combine with they draw nothing that could be the formula's sign) — and the four
# Hangul fillers, letters (Lo) that draw as blanks.
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def first_visible(text: str) -> str:
    """The first character of ``text`` that draws something (see ``_UNSEEN_CATEGORIES``), or ''."""
    for ch in text:
        if unicodedata.category(ch) not in _UNSEEN_CATEGORIES and ch not in _BLANK_LETTERS:
            return ch
    return ""


def for_csv(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs: a leading ``'`` when it starts with a formula sign,
    or when its first visible character, NFKC-normalized (full-width ``＝`` is ``=``), is one."""
    first = unicodedata.normalize("NFKC", first_visible(text))
    return f"'{text}" if text.startswith(FORMULA_STARTS) or first.startswith(FORMULA_STARTS) else text


def _visible(text: str) -> str:
    if text.isprintable():
        return text
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in text.split("\n"))
