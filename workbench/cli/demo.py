"""``workbench demo``: the whole product once, on an embedded default, in minutes on a laptop.

1. synthetic models: a small dense and a small MoE GGUF under ``<data>/models/`` (kept when present;
   ``--shards N`` writes each as a gguf-split set of N files in a directory of its own, as a real
   checkpoint above ~5 GB comes);
2. this machine's ceilings, measured once per host and ledger (so GB/s has walls to be read against);
3. the default sweep (``workbench/cli/data/demo.yaml``, notebook 01) on the best device, through papermill,
   every run recorded in the SQLite ledger; finished points are resumed, so running twice is safe;
4. the report: CSV, Markdown and HTML with the figures under ``<data>/reports/demo/``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from workbench.settings import defaults
from workbench.errors import ParamError
from workbench.records import plural

DEFAULT_SIZE = "32MiB"
# Runs per attempt come from the shipped sweep (5: the fewest a claim is made on), unless --runs.
CAMPAIGN = "demo"
MODELS = (("dense", "gguf"), ("moe", "gguf"))
CEILINGS_SIZE = 64 << 20  # big enough for a stable rate, small enough for seconds
MAX_SHARDS = 16  # a small model has a few dozen tensors; real sets have 2-30 files


def demo_sweep_file() -> Path:
    """The demo's sweep, shipped inside the package (a link to data/sweeps/demo.yaml in a checkout)."""
    return Path(__file__).resolve().parent / "data" / "demo.yaml"


@dataclass(frozen=True)
class DemoOptions:
    """What the demo does and where it writes."""

    size: str
    runs: int | None
    ledger_path: Path
    data_dir: Path
    device: str
    shards: int = 1  # files per model: 1, or a gguf-split set of that many

    @classmethod
    def build(cls, size: str | None = None, runs: int | None = None, ledger_path: str | None = None,
              data_dir: str | None = None, device: str | None = None, shards: int | None = None) -> DemoOptions:
        """Fill the defaults: ./data, the ledger's own default path, the best device."""
        from workbench.formats.synth import parse_size
        from workbench.upload import best_device

        size = size or DEFAULT_SIZE
        parse_size(size)  # a bad size fails now, before anything is written
        if runs is not None and runs < 1:
            raise ParamError("demo", "runs", "needs at least 1 run per attempt")
        shards = 1 if shards is None else shards
        if not 1 <= shards <= MAX_SHARDS:
            raise ParamError("demo", "shards", f"must be 1 (one file per model) to {MAX_SHARDS}, got {shards}")
        data = Path(data_dir) if data_dir else defaults.data_root()
        ledger = Path(ledger_path) if ledger_path else defaults.ledger_path(data)
        return cls(size.replace(" ", ""), runs, ledger, data, device or best_device(), shards)


@dataclass(frozen=True)
class DemoResult:
    """Where everything went, and whether every sweep point completed."""

    options: DemoOptions
    models: tuple[Path, ...]
    ceilings: str
    sweep: Any  # SweepReport
    report: Any  # ReportPaths

    @property
    def ok(self) -> bool:
        return bool(self.sweep.ok)

    def summary_lines(self) -> list[str]:
        s, r = self.sweep, self.report
        status = "all points completed" if s.ok else f"{plural(s.count('failed'), 'point')} FAILED (see the notebooks)"
        return [
            "",
            f"Device:    {self.options.device}",
            f"Models:    {', '.join(map(str, self.models))}",
            f"Ceilings:  {self.ceilings}",
            f"Sweep:     {s.count('done')} run, {s.count('skipped')} resumed — {status}",
            f"Notebooks: {s.out_dir}/",
            f"Ledger:    {self.options.ledger_path}  (workbench ledger list --campaign {CAMPAIGN})",
            f"Report:    {r.html}",
            f"           {r.markdown}, {r.attempts_csv}, {r.runs_csv}",
            f"Figures:   {r.directory / 'figures'}/ (PNG + SVG)" if r.images else f"Figures:   {r.images_note}",
            "Next:      jupyter lab notebooks/   (01_load_sweep: change strategies, press Run)",
        ]


def run_demo(options: DemoOptions, echo: Callable[[str], None] = print, progress: bool = True) -> DemoResult:
    """Models, ceilings, the default sweep and the report; see the module docstring."""
    from tqdm.auto import tqdm

    from workbench.ledger import Ledger
    from workbench.ledger.report import write_report
    from workbench.cli.sweep.execute import run_sweep

    from workbench.output.outdir import OutDir

    OutDir.open(options.data_dir).close()  # a data root that cannot be made is one line, not a traceback
    with tqdm(total=len(MODELS) + 1, desc="demo setup", unit="step", disable=not progress) as bar:
        models = []
        for layout, fmt in MODELS:
            bar.set_postfix_str(f"{layout} model")
            models.append(_model(options, layout, fmt))
            bar.update(1)
        bar.set_postfix_str("ceilings")
        ceilings = _ceilings(options)
        bar.update(1)
    echo(f"models ready; ceilings: {ceilings}; sweeping on {options.device} (ledger {options.ledger_path})")
    sweep = demo_sweep(options, models)
    report = run_sweep(sweep, ledger_path=options.ledger_path, resume=True, progress=progress,
                       out_dir=options.data_dir / "runs" / CAMPAIGN)
    with Ledger(options.ledger_path) as ledger:
        paths = write_report(ledger, CAMPAIGN, options.data_dir / "reports" / CAMPAIGN)
    return DemoResult(options, tuple(models), ceilings, report, paths)


def demo_sweep(options: DemoOptions, models: list[Path]) -> Any:
    """The shipped sweep with the generated models as its files and the demo's runs and device."""
    from workbench.cli.sweep.execute import load_sweep

    sweep = load_sweep(demo_sweep_file())
    parameters = {**sweep.parameters, "device": options.device}
    if options.runs is not None:
        parameters["runs"] = options.runs
    grid = {**sweep.grid, "file": [str(m.resolve()) for m in models]}
    return dataclasses.replace(sweep, parameters=parameters, grid=grid)


def _model(options: DemoOptions, layout: str, fmt: str) -> Path:
    from workbench.cli.notebooks.actions import ensure_model, model_path

    path = model_path(layout, fmt, options.size, root=options.data_dir, shards=options.shards)
    return ensure_model(path, layout=layout, format=fmt, size=options.size, shards=options.shards)


def _ceilings(options: DemoOptions) -> str:
    """Measure this host's walls unless the ledger has them already; one line saying which."""
    from workbench.settings.defaults import host_id
    from workbench.ledger import Ledger
    from workbench.measure.ceilings.walls import measure_ceilings

    with Ledger(options.ledger_path) as ledger:
        known = ledger.ceilings(host=host_id())
        if not known.empty:
            return f"{len(known)} already in the ledger for {host_id()}"
        report = measure_ceilings(options.data_dir / "models", devices=(options.device,), size=CEILINGS_SIZE,
                                  ledger=ledger)
    skipped = f", {len(report.skipped)} not measurable here" if report.skipped else ""
    return f"{len(report.ceilings)} measured for {report.host}{skipped}"
