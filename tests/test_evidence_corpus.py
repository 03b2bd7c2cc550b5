"""The evidence corpus (issue 33): every real loading pattern is credited warm and cold — ``bytes-read``
or ``mapping-touched``, and so a GB/s — and no fake ever is, each on files written by foreign writers
(the safetensors library, gguf-py, huggingface_hub), through :func:`time_external` as ``workbench
external`` runs an engine. The patterns are ``tests/engines/corpus_engine.py``'s."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from workbench.records.external import CREDITED

ENGINE = Path(__file__).parent / "engines" / "corpus_engine.py"
_spec = importlib.util.spec_from_file_location("corpus_engine", ENGINE)
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

FAKE_GRADES = {"dev_zero": {"none"}, "a_copy": {"none"}, "populate_only": {"mapped-only"},
               "madv_populate_only": {"mapped-only"}, "mapped_untouched": {"mapped-only"},
               "sendfile_devnull": {"opened-only"}, "seek_end_then_dev_zero": {"opened-only"},
               "header_only": {"opened-only"}, "readahead_only": {"opened-only"},
               # its open comes after the marker: seen or not by the last look, never credited
               "marker_before_reading": {"none", "opened-only"}, "nothing": {"none"}}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return corpus.write_models(tmp_path_factory.mktemp("corpus"))


def run_pattern(name: str, models: dict[str, Path], cache: str):
    """One run of ``name`` against its model with the cache ``cold`` or ``warm``: (evidence, bytes)."""
    from workbench.errors import CacheStateError

    if corpus.MODEL_FOR.get(name, "st") not in models:
        pytest.skip(f"{name}: transformers is not installed")
    try:
        out = corpus.run_pattern(name, models, cache)
    except CacheStateError as exc:
        pytest.skip(f"{cache} unreachable here: {exc}")
    assert out.error is None, out.error
    return out.report.external.evidence, out.bytes


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("name", [f.__name__ for f in corpus.REAL])
def test_a_real_loader_is_credited(models: dict[str, Path], name: str, cache: str) -> None:
    evidence, nbytes = run_pattern(name, models, cache)
    assert evidence.source == "events", evidence.source  # this machine records the window as events
    assert evidence.grade in CREDITED and nbytes == evidence.model_bytes, evidence.describe()
    assert evidence.describe().startswith(f"engine read {evidence.model} ({evidence.grade}): ")


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("name", [f.__name__ for f in corpus.FAKE])
def test_a_fake_is_never_credited(models: dict[str, Path], name: str, cache: str) -> None:
    evidence, nbytes = run_pattern(name, models, cache)
    assert evidence.source == "events", evidence.source
    assert evidence.grade in FAKE_GRADES[name] and nbytes == 0, evidence.describe()
    assert evidence.describe().startswith(f"no evidence the engine read {evidence.model} ({evidence.grade}: ")
