"""Static PNG and SVG copies of plotly figures, for everything that runs no JavaScript.

A pull request's Markdown, GitHub's notebook view and ``jupyter nbconvert --to html`` show no plotly
figure: they show images. kaleido (plotly's exporter) draws them in a headless Chrome/Chromium — the
one :func:`workbench.settings.defaults.browser_path` names (Debian's ``/usr/bin/chromium`` in CI), never one it
downloads. Where there is none, or it fails to start, :func:`render_static` returns no images and a
one-line reason, and the callers still write the interactive figures.

One browser is started per :func:`render_static` call and draws every figure of it.
"""
from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from workbench.settings import defaults

if TYPE_CHECKING:
    import plotly.graph_objects as go

WIDTH = 1000  # px: readable in a PR at GitHub's content width
DEFAULT_HEIGHT = 450
RENDER_TIMEOUT_S = 120.0  # a browser that has not drawn one figure by then is broken, not slow
PLOTLY_MIME = "application/vnd.plotly.v1+json"


@dataclass(frozen=True)
class StaticImage:
    """One figure drawn: its PNG bytes and its SVG text."""

    key: str
    title: str
    png: bytes
    svg: str


@dataclass(frozen=True)
class StaticImages:
    """The figures of one call drawn (by key), or none and ``unavailable``: why, in one line."""

    images: Mapping[str, StaticImage] = field(default_factory=dict)
    unavailable: str = ""


def figure_title(fig: go.Figure) -> str:
    """The figure's title text ('' without one)."""
    title = fig.layout.title
    return str(title.text) if title is not None and title.text else ""


def render_static(figures: Mapping[str, go.Figure], scale: float = 1.0) -> StaticImages:
    """PNG and SVG of every figure, drawn by one headless browser.

    Never raises for a missing or broken browser: the result then holds no images and says why.
    """
    if not figures:
        return StaticImages()
    browser = defaults.browser_path()
    if not browser:
        return StaticImages(unavailable=no_browser_reason())
    if not os.access(browser, os.X_OK):
        return StaticImages(unavailable=f"static images not drawn: no executable browser at {browser} "
                                        f"({defaults.BROWSER} / BROWSER_PATH); the interactive figures are written")
    try:
        import kaleido  # noqa: F401 - the exporter plotly uses; a dependency, but say so if missing
    except ImportError as exc:
        return StaticImages(unavailable=f"static images not drawn: kaleido is not installed ({exc})")
    try:
        drawn = _in_thread(_draw(dict(figures), browser, scale))
    except Exception as exc:  # noqa: BLE001 - a browser that fails is a reason, never a failed report
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        return StaticImages(unavailable=f"static images not drawn: the browser at {browser} failed "
                                        f"({type(exc).__name__}: {detail})")
    return StaticImages({k: StaticImage(k, figure_title(figures[k]), png, svg) for k, (png, svg) in drawn.items()})


def no_browser_reason() -> str:
    """The one line said where no browser can draw static images."""
    if os.environ.get(defaults.BROWSER, "").strip().lower() == "none":
        return f"static images not drawn: {defaults.BROWSER}=none; the interactive figures are written"
    return ("static images not drawn: no Chrome/Chromium here (apt-get install chromium, or set "
            f"{defaults.BROWSER} or BROWSER_PATH); the interactive figures are written")


def _in_thread(coroutine: Any) -> Any:
    # A notebook kernel already runs an event loop in this thread: asyncio.run needs its own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _draw(figures: dict[str, go.Figure], browser: str, scale: float) -> dict[str, tuple[bytes, str]]:
    import kaleido

    out: dict[str, tuple[bytes, str]] = {}
    # mathjax=False: no figure uses LaTeX, and kaleido would fetch MathJax from a CDN for it.
    async with kaleido.Kaleido(path=browser, mathjax=False, timeout=RENDER_TIMEOUT_S) as k:
        for key, fig in figures.items():
            size = {"width": int(fig.layout.width or WIDTH), "height": int(fig.layout.height or DEFAULT_HEIGHT)}
            png = await k.calc_fig(fig, opts={"format": "png", "scale": scale, **size})
            svg = await k.calc_fig(fig, opts={"format": "svg", **size})
            out[key] = (bytes(png), svg.decode("utf-8") if isinstance(svg, bytes) else str(svg))
    return out


def static_paths(images: StaticImages, directory: str | Path) -> list[Path]:
    """The files :func:`write_static` writes for ``images`` in ``directory``."""
    return [Path(directory) / f"{key}.{kind}" for key in images.images for kind in ("png", "svg")]


def write_static(images: StaticImages, directory: str | Path, *, inputs: Iterable[str | os.PathLike[str]] = (),
                 force: bool = False, made: int = 1) -> list[Path]:
    """``<key>.png`` and ``<key>.svg`` of every drawn figure in ``directory``, each written as
    :func:`workbench.output.files.write_bytes` writes (never over ``inputs``, nor through a link planted
    there, nor into a directory reached through a link: the last ``made`` directories are the
    workbench's); returns the paths."""
    from workbench.output.files import write_bytes

    target = Path(directory)
    written = []  # no empty figures/ beside a report that has none: write_bytes makes it with the first
    for key, image in images.images.items():
        written.append(write_bytes(target / f"{key}.png", image.png, inputs=inputs, force=force, made=made))
        written.append(write_bytes(target / f"{key}.svg", image.svg.encode("utf-8"), inputs=inputs, force=force,
                                   made=made))
    return written


def write_interactive(figures: Mapping[str, go.Figure], path: str | Path, title: str, *,
                      inputs: Iterable[str | os.PathLike[str]] = (), force: bool = False, made: int = 0) -> Path:
    """Every figure in one HTML page, plotly.js inline once (opens offline), written as
    :func:`workbench.output.files.write_text` writes."""
    import html

    from workbench.output.files import write_text

    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig-{key}")
             for i, (key, fig) in enumerate(figures.items())]
    page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
            f"<body>{''.join(parts)}</body></html>\n")
    return write_text(path, page, inputs=inputs, force=force, made=made)


def mime_bundle(fig: go.Figure, image: StaticImage | None) -> dict[str, Any]:
    """What a notebook output holds for ``fig``: the plotly JSON (JupyterLab draws it interactive)
    beside ``image/png`` and ``image/svg+xml`` (what nbconvert's HTML and GitHub show)."""
    bundle: dict[str, Any] = {PLOTLY_MIME: json.loads(fig.to_json()), "text/plain": f"<Figure: {figure_title(fig)}>"}
    if image is not None:
        bundle["image/png"] = base64.b64encode(image.png).decode("ascii")
        bundle["image/svg+xml"] = image.svg
    return bundle
