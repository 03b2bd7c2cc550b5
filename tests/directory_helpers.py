"""What the directory-resolution tests share: a model path refused in one line (by the library and by
``workbench inspect``), and the files a path resolves to."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.errors import FormatError
from workbench.formats import open_index


def refused(path, *parts: str) -> str:
    """``path`` refused by open_index in one line holding every one of ``parts``, and by ``inspect``
    in one line, exit 2, no traceback; returns the line."""
    with pytest.raises(FormatError) as err:
        open_index(path)
    line = str(err.value)
    assert "\n" not in line and all(p in line for p in parts), line
    out = CliRunner().invoke(main, ["inspect", str(path)])
    assert out.exit_code == 2 and "Traceback" not in out.output and out.output.count("\n") == 1, out.output
    return line


def files_of(path) -> list[str]:
    """The names of the files ``path`` resolves to, in order."""
    return [os.path.basename(f.path) for f in open_index(path).files]
