"""Hypothesis strategies that turn a real safetensors header into hostile variants.

The header's JSON is parsed into ordered (key, value) pairs, mutated, and written back by a small
serializer that can also emit what ``json.dumps`` never would: duplicate keys, raw non-UTF-8 bytes
inside a name, lone-surrogate escapes, 5000-digit integers, ``NaN``, deep nesting. Mutations: odd
dtypes (unknown, non-string, unhashable), shapes and data_offsets (huge, negative, float, boolean,
reversed, overlapping, past the end), entries deleted/duplicated/replaced, odd names, odd
``__metadata__``, a header that is not an object, a wrong header length, odd padding.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

from fuzz_values import interesting_ints, odd_names

KNOWN_DTYPES = ("F32", "F16", "BF16", "U8", "I64", "F4", "F6_E2M3", "BOOL", "F8_E4M3", "C64")


@dataclass(frozen=True)
class Raw:
    """JSON text (or not-quite-JSON bytes) written as is."""

    text: bytes


class Obj(list):
    """A JSON object as ordered (key, value) pairs, so duplicate keys survive."""


def parse_header(head: bytes) -> Obj:
    """A valid safetensors header (8-byte length + JSON) → its top-level pairs."""
    (n,) = struct.unpack("<Q", head[:8])
    return json.loads(head[8:8 + n], object_pairs_hook=Obj)


def dump(value: Any) -> bytes:
    """Serialize pairs, lists and scalars; ``Raw`` goes out verbatim (keys too)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Obj):
        return b"{" + b",".join(_key(k) + b":" + dump(v) for k, v in value) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(dump(v) for v in value) + b"]"
    return json.dumps(value).encode()  # str with \uXXXX escapes (lone surrogates included), numbers, NaN


def _key(key: str | Raw) -> bytes:
    return b'"' + key.text + b'"' if isinstance(key, Raw) else json.dumps(key).encode()


_RAW_NUMBERS = (b"9" * 5000, b"-1", b"1e999", b"-0", b"1.5", b"1e2", b"NaN", b"Infinity", b"0x10", b"01")


@lru_cache(maxsize=None)  # built once: building strategies costs more than drawing
def odd_scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=12),
        st.integers(-(1 << 70), 1 << 70), st.sampled_from(_RAW_NUMBERS).map(Raw),
    )


@lru_cache(maxsize=None)
def odd_json() -> st.SearchStrategy[Any]:
    """Any JSON value, nested a little, with the odd numbers above; sometimes nested very deep."""
    nested = st.recursive(
        odd_scalars(),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.lists(st.tuples(st.text(max_size=8), inner), max_size=4).map(Obj)),
        max_leaves=12,
    )
    deep = st.integers(100, 100_000).map(lambda k: Raw(b"[" * k + b"]" * k))
    return st.one_of(nested, deep)


@lru_cache(maxsize=None)
def odd_dtype() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(KNOWN_DTYPES), st.text(max_size=8), odd_json())


@lru_cache(maxsize=None)
def odd_dims() -> st.SearchStrategy[Any]:
    ints = st.one_of(interesting_ints(8, 4), st.sampled_from([1 << 64, 10**30, -1]))
    return st.one_of(st.lists(ints, max_size=10), st.lists(st.one_of(ints, odd_scalars()), max_size=4), odd_json())


@lru_cache(maxsize=None)
def odd_offsets(data_len: int) -> st.SearchStrategy[Any]:
    ints = st.one_of(interesting_ints(8, data_len), st.integers(0, data_len + 64), st.just(-8))
    return st.one_of(st.lists(ints, min_size=2, max_size=2), st.lists(ints, max_size=3),
                     st.lists(odd_scalars(), min_size=2, max_size=2), odd_json())


@st.composite
def name_key(draw, others: list[Any]) -> Any:
    raw = draw(odd_names())
    how = draw(st.sampled_from(["raw", "text", "surrogate", "copy"]))
    if how == "raw":  # bytes straight into the file, invalid UTF-8 included
        return Raw(raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"'))
    if how == "surrogate":
        return Raw(b"w\\ud800" + raw[:8].replace(b'"', b"").replace(b"\\", b""))
    if how == "copy" and others:
        return draw(st.sampled_from(others))
    return raw.decode("utf-8", "replace")


def _tensors(pairs: Obj) -> list[int]:
    return [i for i, (k, v) in enumerate(pairs) if k != "__metadata__" and isinstance(v, Obj)]


@st.composite
def mutate_field(draw, pairs: Obj, data_len: int) -> str:
    idx = _tensors(pairs)
    if not idx:
        return "field (no tensors)"
    i = draw(st.sampled_from(idx))
    entry = Obj(pairs[i][1])
    field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "extra", "delete"]))
    strategies = {"dtype": odd_dtype(), "shape": odd_dims(), "data_offsets": odd_offsets(data_len)}
    if field == "delete":
        del entry[draw(st.integers(0, len(entry) - 1))]
    elif field == "extra":
        entry.append((draw(st.text(max_size=8)), draw(odd_json())))
    else:
        entry[:] = [(k, draw(strategies[field]) if k == field else v) for k, v in entry]
    pairs[i] = (pairs[i][0], entry)
    return f"field {field}"


def _offsets(pairs: Obj, i: int) -> tuple[int, int] | None:
    """The entry's [begin, end] when an earlier mutation left it intact."""
    found = [v for k, v in pairs[i][1] if k == "data_offsets"]
    ok = found and isinstance(found[0], list) and len(found[0]) == 2 and all(type(x) is int for x in found[0])
    return tuple(found[0]) if ok else None


@st.composite
def mutate_ranges(draw, pairs: Obj, data_len: int) -> str:
    idx = _tensors(pairs)
    if len(idx) < 2:
        return "ranges (too few tensors)"
    i, j = draw(st.sampled_from(idx)), draw(st.sampled_from(idx))
    mine, theirs = _offsets(pairs, i), _offsets(pairs, j)
    if mine is None or theirs is None:
        return "ranges (offsets already mutated)"
    (begin, end), other = mine, theirs[0]
    how = draw(st.sampled_from(["overlap", "past-end", "shift"]))
    start = {"overlap": other + draw(st.integers(0, 8)), "past-end": data_len - draw(st.integers(0, 4)),
             "shift": begin + draw(st.integers(-4, 4))}[how]
    new = [start, start + end - begin]
    pairs[i] = (pairs[i][0], Obj((k, new if k == "data_offsets" else v) for k, v in pairs[i][1]))
    return f"ranges {how}"


@st.composite
def mutate_entries(draw, pairs: Obj, data_len: int) -> str:
    i = draw(st.integers(0, len(pairs) - 1)) if pairs else 0
    how = draw(st.sampled_from(["rename", "delete", "duplicate", "replace", "metadata"]))
    if not pairs and how != "metadata":
        return "entries (empty)"
    if how == "rename":
        pairs[i] = (draw(name_key([k for k, _ in pairs])), pairs[i][1])
    elif how == "delete":
        del pairs[i]
    elif how == "duplicate":
        pairs.insert(draw(st.integers(0, len(pairs))), pairs[i])
    elif how == "replace":
        pairs[i] = (pairs[i][0], draw(odd_json()))
    else:
        meta = draw(st.one_of(odd_json(), st.lists(st.tuples(st.text(max_size=6), odd_scalars()),
                                                   max_size=3).map(Obj)))
        pairs.insert(0, ("__metadata__", meta))
    return f"entries {how}"


MUTATIONS = (mutate_field, mutate_field, mutate_ranges, mutate_entries)


@st.composite
def mutated_safetensors(draw, head: bytes, data_len: int) -> tuple[bytes, str]:
    """A mutated copy of a valid safetensors header (length + JSON) and what was done."""
    pairs = parse_header(head)
    done = [draw(draw(st.sampled_from(MUTATIONS))(pairs, data_len)) for _ in range(draw(st.integers(1, 3)))]
    body: Any = pairs
    if draw(st.integers(0, 19)) == 0:
        body, done = draw(odd_json()), done + ["not an object"]
    raw = dump(body) + draw(st.sampled_from([b""] * 6 + [b"    ", b"\0\0\0", b"\n\t ", b"}", b"\xff"]))
    length = len(raw)
    if draw(st.integers(0, 9)) == 0:
        length, done = draw(interesting_ints(8, len(raw))), done + ["header length"]
    return struct.pack("<Q", length) + raw, "; ".join(done)
