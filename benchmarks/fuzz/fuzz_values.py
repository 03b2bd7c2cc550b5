"""Value strategies shared by the GGUF and safetensors mutators: integers and names that break things."""
from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

# Names that have broken parsers: invalid UTF-8 (stray continuation byte, truncated sequence, an
# encoded surrogate, an overlong NUL), control characters that would split a one-line error, names
# long enough to hurt a backtracking regex or int(), and names that look like MoE experts.
_NASTY_NAMES = (
    b"", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\x80", b"a\nb", b"\r", b"\x00", b"\x1b[31mred",
    b"blk.0.ffn_gate_exps.weight", b"blk.1.ffn_down_exps.weight",
    b"model.layers.0.mlp.experts.3.gate_proj.weight", b"model.layers.1.block_sparse_moe.experts.0.w2.weight",
    b"blk." + b"9" * 5000 + b".ffn_up_exps.weight",
    b"model.layers." + b"7" * 5000 + b".mlp.experts.0.up_proj.weight",
    b"model.layers.0.mlp.experts." + b"1" * 5000 + b".up_proj.weight",
    b"layers.0." + b"experts.0." * 400 + b"x",
    b"layers.0.experts.0." * 300 + b"x",
    b"layers.1.experts.2.w1" * 300,
)


@lru_cache(maxsize=4096)  # built once per (width, original): building costs more than drawing
def interesting_ints(width: int, original: int) -> st.SearchStrategy[int]:
    """Integers for a ``width``-byte unsigned field: edges, powers of two, near the original."""
    top = (1 << 8 * width) - 1
    edges = {0, 1, 2, 3, 7, 8, 31, 32, 33, 4095, 4096, 4097, top, top >> 1, (top >> 1) + 1,
             original, original + 1, max(original - 1, 0), original * 2, original << 16}
    edges |= {(1 << b) for b in (15, 16, 31, 32, 40, 48, 60, 62, 63) if b < 8 * width}
    edges |= {(1 << b) - 1 for b in (16, 31, 32, 60) if b < 8 * width}
    return st.one_of(st.sampled_from(sorted(e & top for e in edges)), st.integers(0, top))


@lru_cache(maxsize=None)
def odd_names() -> st.SearchStrategy[bytes]:
    """Bytes for a tensor name or key: nasty, random, or ordinary text."""
    return st.one_of(
        st.sampled_from(_NASTY_NAMES),
        st.binary(max_size=40),
        st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.integers(1, 1 << 16).map(lambda n: b"n" * n),
    )
