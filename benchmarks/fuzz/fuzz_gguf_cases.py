"""Hypothesis strategies that turn a real GGUF header into hostile variants.

The header is split into labelled tokens (every count, length, type, dimension, offset and string
of it), so a mutation can aim at one field and keep the rest intact; that gets past the first check
and into the deeper ones. Mutations: any integer field set to an interesting value (0, 2^32, 2^60,
2^64-1, off by one …), any key or tensor name replaced (non-UTF-8, control characters, huge, a
copy of another name), overlapping / out-of-bounds / misaligned offsets, entries deleted or
duplicated, odd key/values added (unknown types, nested and lying arrays), general.alignment set
to bad values, stacked experts of zero bytes, and the whole header re-encoded big-endian.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import strategies as st

from fuzz_values import interesting_ints, odd_names

WIDTH = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
_SCALAR_KIND = {0: "u8", 1: "u8", 2: "u16", 3: "u16", 4: "u32", 5: "u32", 6: "u32", 7: "u8",
                10: "u64", 11: "u64", 12: "u64"}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


@dataclass(frozen=True)
class Tok:
    """One field of the header: ``kind`` is u8/u16/u32/u64 (an int) or bytes."""

    label: str  # e.g. "tensor[3].offset", "kv[2].key.len"
    kind: str
    value: int | bytes


def tokenize(head: bytes) -> list[Tok]:
    """A valid little-endian GGUF header (through its padding) as labelled tokens."""
    r = _Reader(head)
    toks = [Tok("magic", "bytes", r.raw(4)), r.int("version", "u32")]
    toks += [r.int("tensor_count", "u64"), r.int("kv_count", "u64")]
    for i in range(toks[3].value):
        toks += r.string(f"kv[{i}].key")
        vtype = r.int(f"kv[{i}].type", "u32")
        toks += [vtype] + r.value(f"kv[{i}]", vtype.value)
    for i in range(toks[2].value):
        toks += r.string(f"tensor[{i}].name")
        n_dims = r.int(f"tensor[{i}].n_dims", "u32")
        toks += [n_dims] + [r.int(f"tensor[{i}].dim", "u64") for _ in range(n_dims.value)]
        toks += [r.int(f"tensor[{i}].type", "u32"), r.int(f"tensor[{i}].offset", "u64")]
    return toks + [Tok("pad", "bytes", head[r.pos:])]


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.pos = buf, 0

    def raw(self, n: int) -> bytes:
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def int(self, label: str, kind: str) -> Tok:
        return Tok(label, kind, int.from_bytes(self.raw(WIDTH[kind]), "little"))

    def string(self, label: str) -> list[Tok]:
        n = self.int(f"{label}.len", "u64")
        return [n, Tok(label, "bytes", self.raw(n.value))]

    def value(self, label: str, vtype: int) -> list[Tok]:
        if vtype == _STRING:
            return self.string(f"{label}.value")
        if vtype == _ARRAY:
            itype, count = self.int(f"{label}.item_type", "u32"), self.int(f"{label}.count", "u64")
            return [itype, count] + [t for _ in range(count.value) for t in self.value(f"{label}.item", itype.value)]
        return [self.int(f"{label}.value", _SCALAR_KIND[vtype])]


def encode(toks: list[Tok], order: str = "<", repad: bool = True) -> bytes:
    """Tokens → bytes; ``repad`` recomputes the padding to the (possibly mutated) alignment."""
    out = bytearray()
    for t in toks:
        if t.label == "pad" and repad:
            continue
        if t.kind == "bytes":
            out += t.value
        else:
            out += (t.value % (1 << 8 * WIDTH[t.kind])).to_bytes(WIDTH[t.kind], "big" if order == ">" else "little")
    if repad:
        align = _alignment(toks)
        out += b"\0" * (-len(out) % align)
    return bytes(out)


def _alignment(toks: list[Tok]) -> int:
    for i, t in enumerate(toks):
        if t.kind == "bytes" and t.value == b"general.alignment" and t.label.endswith(".key"):
            value = toks[i + 2] if i + 2 < len(toks) else None
            if value is not None and value.kind != "bytes" and 0 < value.value <= 1 << 16 \
                    and not value.value & (value.value - 1):
                return value.value
    return 32


def _indices(toks: list[Tok], suffix: str, kind: str | None = None) -> list[int]:
    return [i for i, t in enumerate(toks) if t.label.endswith(suffix) and (kind is None or t.kind == kind)]


def _set_bytes(toks: list[Tok], i: int, value: bytes, fix_len: bool) -> None:
    toks[i] = replace(toks[i], value=value)
    if fix_len and toks[i - 1].label == toks[i].label + ".len":
        toks[i - 1] = replace(toks[i - 1], value=len(value))


def _entry(toks: list[Tok], prefix: str) -> tuple[int, int]:
    """[start, end) of the tokens of one kv or tensor entry, e.g. prefix 'tensor[2].'."""
    idx = [i for i, t in enumerate(toks) if t.label.startswith(prefix)]
    return idx[0], idx[-1] + 1


@st.composite
def mutate_int(draw, toks: list[Tok]) -> str:
    ints = [i for i, t in enumerate(toks) if t.kind != "bytes"]
    i = draw(st.sampled_from(ints))
    toks[i] = replace(toks[i], value=draw(interesting_ints(WIDTH[toks[i].kind], toks[i].value)))
    return f"int {toks[i].label}"


@st.composite
def mutate_name(draw, toks: list[Tok]) -> str:
    names = [i for i, t in enumerate(toks) if t.kind == "bytes" and t.label.endswith(("key", "name", "value"))]
    i = draw(st.sampled_from(names))
    others = [toks[j].value for j in names if j != i] or [b"x"]
    value = draw(st.one_of(odd_names(), st.sampled_from(others)))
    _set_bytes(toks, i, value, fix_len=draw(st.booleans()) or draw(st.booleans()))
    return f"name {toks[i].label}"


@st.composite
def mutate_offsets(draw, toks: list[Tok]) -> str:
    offs = _indices(toks, ".offset")
    if len(offs) < 2:
        return "offsets (none)"
    i, j = draw(st.sampled_from(offs)), draw(st.sampled_from(offs))
    how = draw(st.sampled_from(["overlap", "misalign", "past-end", "swap"]))
    if how == "overlap":
        value = toks[j].value + draw(st.sampled_from([0, 32, 64, 4096]))
    elif how == "misalign":
        value = toks[i].value + draw(st.integers(1, 31))
    elif how == "past-end":
        value = toks[j].value + draw(st.sampled_from([1 << 18, 1 << 24, 1 << 32, 1 << 62]))
    else:
        toks[i], toks[j] = replace(toks[i], value=toks[j].value), replace(toks[j], value=toks[i].value)
        return "offsets swap"
    toks[i] = replace(toks[i], value=value)
    return f"offsets {how}"


@st.composite
def mutate_entries(draw, toks: list[Tok]) -> str:
    kind = draw(st.sampled_from(["kv", "tensor"]))
    prefixes = sorted({t.label.split(".")[0] + "." for t in toks if t.label.startswith(f"{kind}[")})
    if not prefixes:
        return f"entries {kind} (none)"
    start, end = _entry(toks, draw(st.sampled_from(prefixes)))
    how = draw(st.sampled_from(["delete", "duplicate"]))
    chunk = toks[start:end]
    toks[start:end] = [] if how == "delete" else chunk + chunk
    if draw(st.booleans()) or draw(st.booleans()):
        count = 2 if kind == "tensor" else 3
        toks[count] = replace(toks[count], value=toks[count].value + (-1 if how == "delete" else 1))
    return f"entries {how} {kind}"


@st.composite
def gguf_value(draw, label: str, depth: int = 0) -> tuple[int, list[Tok]]:
    """An odd key/value payload: (type, tokens), arrays nested and counts possibly lying."""
    vtype = draw(st.sampled_from([0, 4, 6, 7, 8, 9, 10, 12, 13, 255, 1 << 31]) if depth < 6 else st.just(4))
    if vtype in _SCALAR_KIND:
        kind = _SCALAR_KIND[vtype]
        return vtype, [Tok(f"{label}.value", kind, draw(interesting_ints(WIDTH[kind], 0)))]
    if vtype == _STRING:
        raw = draw(odd_names())
        return vtype, [Tok(f"{label}.value.len", "u64", len(raw)), Tok(f"{label}.value", "bytes", raw)]
    if vtype != _ARRAY:
        return vtype, [Tok(f"{label}.value", "bytes", draw(st.binary(max_size=16)))]
    items = [draw(gguf_value(f"{label}.item", depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    itype = items[0][0] if items else draw(st.sampled_from([0, 8, 9, 13]))
    count = draw(st.one_of(st.just(len(items)), interesting_ints(8, len(items))))
    body = [t for _, ts in items for t in ts]
    return vtype, [Tok(f"{label}.item_type", "u32", itype), Tok(f"{label}.count", "u64", count)] + body


@st.composite
def add_kv(draw, toks: list[Tok]) -> str:
    key = draw(st.one_of(st.sampled_from([b"general.alignment", b"general.name", b"tokenizer.ggml.tokens"]),
                         odd_names()))
    if key == b"general.alignment" and draw(st.booleans()):
        vtype, value = _UINT32, [Tok("new.value", "u32", draw(interesting_ints(4, 32)))]
    else:
        vtype, value = draw(gguf_value("new"))
    new = [Tok("new.key.len", "u64", len(key)), Tok("new.key", "bytes", key), Tok("new.type", "u32", vtype)] + value
    kv_end = max([i + 1 for i, t in enumerate(toks) if t.label.startswith("kv[")] or [4])
    toks[kv_end:kv_end] = new
    if draw(st.booleans()) or draw(st.booleans()):
        toks[3] = replace(toks[3], value=toks[3].value + 1)
    return f"add kv type {vtype}"


@st.composite
def expert_bomb(draw, toks: list[Tok]) -> str:
    """A stacked-experts tensor that claims a huge expert count with zero-byte experts."""
    names = [i for i, t in enumerate(toks) if t.kind == "bytes" and b"_exps.weight" in t.value]
    if not names:
        return "expert bomb (no stacked experts)"
    i = draw(st.sampled_from(names))
    dims = [j for j in range(i + 2, i + 6) if j < len(toks) and toks[j].label.endswith(".dim")]
    if len(dims) < 3:
        return "expert bomb (not 3-d)"
    toks[dims[1]] = replace(toks[dims[1]], value=0)
    toks[dims[2]] = replace(toks[dims[2]], value=draw(st.sampled_from([1 << 20, 1 << 28, 1 << 40, (1 << 64) - 1])))
    return "expert bomb"


MUTATIONS = (mutate_int, mutate_name, mutate_offsets, mutate_entries, add_kv, expert_bomb)


@st.composite
def mutated_gguf(draw, head: bytes) -> tuple[bytes, str]:
    """A mutated copy of a valid GGUF header (bytes through the padding) and what was done."""
    toks = tokenize(head)
    done = [draw(draw(st.sampled_from(MUTATIONS))(toks)) for _ in range(draw(st.integers(1, 3)))]
    order = draw(st.sampled_from(["<"] * 9 + [">"]))
    if order == ">":  # every integer big-endian, as a big-endian host writes it (magic stays b"GGUF")
        done.append("big-endian")
    return encode(toks, order, repad=draw(st.integers(0, 9)) > 0), "; ".join(done)
