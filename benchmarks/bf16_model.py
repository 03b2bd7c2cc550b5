"""A dense LLM-shaped safetensors file in bfloat16, the dtype real checkpoints ship — for comparing the
reference strategies (peers) with the workbench's own on the file the issue-11 numbers are about.

    python benchmarks/bf16_model.py /tmp/bf16-1GiB.safetensors --size 1GiB

It is ``workbench synth --format safetensors --layout dense`` with every F16 tensor relabelled BF16:
same shapes, same bytes, tensors back to back (what InstantTensor requires); norms stay F32. The
synthetic content has the top exponent bit of every 16-bit value cleared, so the values are finite read
as either type. The data region is copied with ``copy_file_range`` after the rewritten header.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from workbench.formats.synth import parse_size, write_synthetic  # noqa: E402


def relabel(src: Path, dst: Path, old: str = "F16", new: str = "BF16") -> int:
    """Copy ``src`` to ``dst`` with every ``old`` tensor declared ``new``; returns how many changed."""
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    changed = 0
    for name, entry in header.items():
        if name != "__metadata__" and entry["dtype"] == old:
            entry["dtype"], changed = new, changed + 1
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 8)
    size = src.stat().st_size
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(struct.pack("<Q", len(raw)) + raw)
        fout.flush()
        offset, end = 8 + n, size
        while offset < end:
            copied = os.copy_file_range(fin.fileno(), fout.fileno(), end - offset, offset)
            if copied == 0:
                raise OSError(f"{src}: short copy at {offset} of {end}")
            offset += copied
        os.fsync(fout.fileno())
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the .safetensors file to write")
    parser.add_argument("--size", default="1GiB", help="approximate size (default 1GiB; the issue's file: 8GiB)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent) as scratch:
        f16 = Path(scratch) / "f16.safetensors"
        write_synthetic(f16, format="safetensors", layout="dense", size=parse_size(args.size), seed=args.seed)
        changed = relabel(f16, args.out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {changed} tensors BF16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
