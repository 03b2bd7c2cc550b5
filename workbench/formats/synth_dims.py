"""A synthetic model's hyper-parameters (:class:`Dims`) and the expert width rule they rest on.

Its own module so that the layout planner (synth_layout) and the expert tensors (synth_experts) both
build on it without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass

PAGE = 4096
EXPERT_STRIDES = ("page", "odd")
_ROW_BLOCK = 32  # a GGUF row (numpy's last dimension) must hold whole Q4_0/Q8_0 blocks
_BYTES = {"Q4_0": (32, 18), "Q8_0": (32, 34), "F16": (1, 2), "F32": (1, 4), "BF16": (1, 2)}  # per block


def page_multiple_width(hidden: int, dtype: str) -> int:
    """The smallest FFN width ``w`` (a multiple of 32) for which a ``w × hidden`` matrix of ``dtype``
    is a whole number of pages: every FFN width that is a multiple of it gives page-multiple experts.

    At Q4_0 (18 B per 32 elements) that needs ``w · hidden`` to be a multiple of 65536, so hidden 2048
    gives 32 (the A3B's 768 is 216 pages) and hidden 64 gives 1024 (9 pages).
    """
    elements, nbytes = _BYTES[dtype]
    width = _ROW_BLOCK
    while (width * hidden // elements * nbytes) % PAGE:
        width += _ROW_BLOCK  # terminates: width = 32 · 4096 always gives a page multiple
    return width


def odd_width(hidden: int, dtype: str) -> int:
    """The FFN width nearest ``3/8 · hidden`` for which one expert is NOT a whole number of pages: the
    tiny-model case of the second write-up, where the experts land at changing remainders and in-place
    placement must decline. Quantized widths step by the 32-element block, float widths by one.

    Raises ValueError where no width does it (an F16 row of 2048 elements is a page already).
    """
    elements, nbytes = _BYTES[dtype]
    step = _ROW_BLOCK if elements > 1 else 1
    start = max(step, round(hidden * 3 / 8 / step) * step)
    for width in range(start, start + PAGE * step, step):
        if (width * hidden // elements * nbytes) % PAGE:
            return width
    raise ValueError(f"every {dtype} expert of hidden size {hidden} is a whole number of pages")


@dataclass(frozen=True)
class Dims:
    """Model hyper-parameters derived from the hidden size."""

    hidden: int
    layers: int
    vocab: int
    experts: int
    matrix_dtype: str = "Q4_0"
    expert_layout: str = "stacked"  # GGUF always; safetensors "split" (one tensor per expert) or "stacked"
    ff_dim: int = 0  # a real model's FFN width; 0: derived from hidden
    expert_stride: str = "page"  # "page": every expert a whole number of pages; "odd": none is

    @property
    def head_dim(self) -> int:
        return 64 if self.hidden < 1024 else 128

    @property
    def kv(self) -> int:  # grouped-query attention: a quarter of the heads for k and v
        return max(1, self.hidden // self.head_dim // 4) * self.head_dim

    @property
    def ff(self) -> int:
        return self.ff_dim or _round_up(self.hidden * 8 // 3, 64)

    @property
    def expert_ff(self) -> int:
        """A3B: hidden 2048 → expert FFN 768; rounded to the nearest page-multiple width, so small
        hidden sizes get a wider FFN (at Q4_0 an expert cannot be smaller than 9 pages). With
        ``expert_stride="odd"`` the nearest width whose experts are not page multiples."""
        if self.expert_stride == "odd":
            return odd_width(self.hidden, self.matrix_dtype)
        unit = page_multiple_width(self.hidden, self.matrix_dtype)
        return max(unit, round(self.hidden * 3 / 8 / unit) * unit)

    @property
    def shared_ff(self) -> int:  # the shared expert is a dense tensor: no page rounding needed
        return _round_up(self.hidden * 3 // 8, 32)


def _round_up(x: int, n: int) -> int:
    return -(-x // n) * n
