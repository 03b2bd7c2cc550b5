"""Three MoE layouts every slice-landing test reads back against: experts on page boundaries, experts of an
odd stride (no slice a page multiple, none page-aligned), and gguf-py's own tiny experts (288–2,048 B)."""
from __future__ import annotations

from pathlib import Path

from test_expert_miss_batch import _tiny_gguf

from workbench.formats import open_index
from workbench.formats.synth import write_synthetic


def three_layouts(d: Path, seed: int) -> dict:
    """``{"page", "odd", "gguf-py"}`` → an opened index of each, written under ``d`` (seeds ``seed``, ``seed + 1``)."""
    page = write_synthetic(d / "page.gguf", format="gguf", layout="moe", size=6 << 20, experts=16, alignment=4096,
                           seed=seed).path
    odd = write_synthetic(d / "odd.gguf", format="gguf", layout="moe", size=4 << 20, experts=16, alignment=32,
                          expert_stride="odd", seed=seed + 1).path
    return {"page": open_index(page), "odd": open_index(odd), "gguf-py": _tiny_gguf(d / "tiny.gguf")}
