"""What the notebooks share: where data lives, batch-or-interactive, and one ipywidgets panel shape.

A notebook builds a :class:`Panel` from its parameters: controls pre-filled with them, a Run button,
a status line and an output area. Under papermill (no front end driving the kernel) the panel runs
the parameters at once and prints into the cell; opened in JupyterLab it waits for the button and
draws into its output area. The measuring itself lives in :mod:`workbench.cli.notebooks.actions`.
"""
from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from workbench.settings import defaults
from workbench.errors import WorkbenchError
from workbench.output.untrusted import for_html

Action = Callable[[Mapping[str, Any], Callable[[str], None]], Sequence[Any]]


def ledger_path(value: str | os.PathLike[str] | None = None) -> Path:
    """The ledger a notebook writes: the parameter, else :func:`workbench.settings.defaults.ledger_path`
    (``$WORKBENCH_LEDGER``, else ``ledger.sqlite`` in the data root)."""
    return Path(value).expanduser() if value else defaults.ledger_path()


def in_batch(autorun: bool | None = None) -> bool:
    """Whether to run the parameters now instead of waiting for the Run button.

    ``autorun`` True/False decides; None asks the kernel: JupyterLab (and Notebook 7) send the cell's
    id with every execute request, papermill's client does not. ``WORKBENCH_BATCH=1`` also forces it.
    """
    if autorun is not None:
        return bool(autorun)
    if defaults.batch():
        return True
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else {}
    except Exception:  # noqa: BLE001 - outside a kernel (a script): nothing to wait for
        return True
    return not (parent or {}).get("metadata", {}).get("cellId")


def parse_list(text: str) -> list[Any]:
    """``"2, 4"`` → ``[2, 4]``; each item read as YAML (numbers, true/false, null, strings)."""
    import yaml

    return [yaml.safe_load(item.strip()) for item in str(text).split(",") if item.strip()]


def results_html(frame: Any, css_class: str = "wb-results") -> Any:
    """A DataFrame as an HTML table the tests and the browser can find by its class; every text cell
    cleaned by :func:`workbench.output.untrusted.for_html` (ledger text is untrusted)."""
    from IPython.display import HTML

    cleaned = frame.rename(columns=for_html).map(_html_cell)
    return HTML(f'<div class="{for_html(css_class)}">{cleaned.to_html(index=False, na_rep="—", escape=False)}</div>')


def _html_cell(value: Any) -> Any:
    """A number or a missing value as it is (na_rep shows the latter); anything else as escaped text."""
    import numbers

    if value is None or isinstance(value, numbers.Number):
        return value
    return for_html(value)


class Panel:
    """Controls + Run button + status line + output area around one ``action``.

    ``action(values, say)`` receives the controls' current values and a status callback, and returns
    what to display (DataFrames, HTML, plotly figures) in order.
    """

    def __init__(self, title: str, controls: Mapping[str, Any], action: Action,
                 extra: Sequence[Any] = ()):
        import ipywidgets as w

        self.title, self.controls, self.action = title, dict(controls), action
        self.extra = list(extra)
        self.button = w.Button(description="Run", button_style="primary", icon="play",
                               tooltip="Measure with the values above", _dom_classes=["wb-run"])
        self.status = w.HTML(value="<i>Set the values above and press Run.</i>")
        self.output = w.Output(_dom_classes=["wb-output"])
        self.runs = 0
        self.button.on_click(lambda _b: self.run(into_output=True))

    def values(self) -> dict[str, Any]:
        """The controls' current values, by name."""
        return {name: widget.value for name, widget in self.controls.items()}

    def widget(self) -> Any:
        import ipywidgets as w

        header = w.HTML(f"<h3>{for_html(self.title)}</h3>")
        # A control may be a composite (a ParamGrid) that shows its widgets through ``box``.
        controls = [getattr(c, "box", c) for c in self.controls.values()]
        rows = [header, *controls, *self.extra, w.HBox([self.button, self.status]), self.output]
        return w.VBox(rows)

    def show(self, autorun: bool | None = None) -> list[Any]:
        """Display the panel; in batch mode also run once now, printing into the cell."""
        from IPython.display import display

        display(self.widget())
        if in_batch(autorun):
            return self.run(into_output=False)
        return []

    def run(self, into_output: bool = True) -> list[Any]:
        """Run the action with the current values and display its results (in the output area)."""
        self.runs += 1
        self.button.disabled = True
        self._say(f"run {self.runs}: starting …")
        try:
            items = list(self.action(self.values(), self._say))
        except WorkbenchError as exc:
            self._say(f"run {self.runs} failed: {exc}", error=True)
            if not into_output:
                raise  # batch: the notebook (and the sweep point) fails with the one-line error
            return []
        except Exception:
            self._say(f"run {self.runs} failed (traceback below)", error=True)
            if not into_output:
                raise
            with self.output:
                print(traceback.format_exc())
            return []
        finally:
            self.button.disabled = False
        self._say(f"run {self.runs} finished")
        self._display(items, into_output)
        return items

    def _display(self, items: Sequence[Any], into_output: bool) -> None:
        if not into_output:  # batch: straight into the cell, where the saved notebook keeps it —
            _show_all(with_static_images(items))  # with each figure's PNG and SVG for nbconvert/GitHub
            return
        # The Run button's output area is a widget, which no saved notebook keeps: the figures stay
        # interactive only (jupyterlab-plotly would show a bundle's PNG until the pointer enters it).
        self.output.clear_output(wait=True)
        with self.output:
            _show_all(items)

    def _say(self, text: str, error: bool = False) -> None:
        color = "#b00" if error else "#333"
        self.status.value = f'<span class="wb-status" style="color:{color}">{for_html(text)}</span>'


class _Bundle:
    """A figure as one notebook output: plotly JSON beside its PNG and SVG (``ledger.static``)."""

    def __init__(self, bundle: Mapping[str, Any]):
        self.bundle = dict(bundle)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle


def with_static_images(items: Sequence[Any]) -> list[Any]:
    """``items`` with every plotly figure replaced by a bundle that also holds its static PNG and
    SVG, drawn by one browser for all of them — so nbconvert's HTML and GitHub's notebook view show
    the figures; where none can be drawn, one line says why before the (interactive) figures."""
    import plotly.graph_objects as go
    from IPython.display import HTML

    from workbench.ledger.figures.static import mime_bundle, render_static

    figures = {str(i): item for i, item in enumerate(items) if isinstance(item, go.Figure)}
    if not figures:
        return list(items)
    static = render_static(figures)
    out: list[Any] = []
    if static.unavailable:
        out.append(HTML(f'<p class="wb-static-note"><i>{for_html(static.unavailable)}</i></p>'))
    for i, item in enumerate(items):
        key = str(i)
        out.append(_Bundle(mime_bundle(item, static.images.get(key))) if key in figures else item)
    return out


def _show_all(items: Sequence[Any]) -> None:
    from IPython.display import display

    for item in items:
        display(item)


class ParamGrid:
    """One text box per parameter of each selected strategy; ``"2, 4"`` sweeps, empty keeps the default."""

    def __init__(self, strategies: Any, preset: Mapping[str, Mapping[str, Any]]):
        import ipywidgets as w

        self._pick, self._texts, self.box = strategies, {}, w.VBox()
        for name, grid in (preset or {}).items():
            for key, value in grid.items():
                values = value if isinstance(value, (list, tuple)) else [value]
                self._texts[(name, key)] = ", ".join(map(str, values))
        strategies.observe(lambda _change: self._rebuild(), names="value")
        self._rebuild()

    def _rebuild(self) -> None:
        import ipywidgets as w

        from workbench.strategies import STRATEGIES

        rows = []
        for name in self._pick.value:
            for key, default in STRATEGIES.get(name).param_defaults().items():
                text = w.Text(value=self._texts.get((name, key), ""), description=f"{name}.{key}",
                              placeholder=f"default {default}", style={"description_width": "initial"})
                text.observe(lambda c, k=(name, key): self._texts.__setitem__(k, c["new"]), names="value")
                rows.append(text)
        self.box.children = rows

    @property
    def value(self) -> dict[str, dict[str, list[Any]]]:
        grid: dict[str, dict[str, list[Any]]] = {}
        for (name, key), text in self._texts.items():
            if name in self._pick.value and text.strip():
                grid.setdefault(name, {})[key] = parse_list(text)
        return grid
