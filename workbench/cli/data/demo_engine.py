"""A small stand-alone engine for notebook 06 and the README: it loads every tensor of a GGUF (through
gguf-py) or safetensors model (its headers read by hand) the way an inference engine's loader would,
prints its own phase lines and a ready line, then idles until it is killed.

    python demo_engine.py MODEL [--read heap|mmap] [--idle-s 60]

MODEL is a file, or a model of several files as engines take one: a directory (its
``model.safetensors.index.json``, else its ``*.safetensors``, else its ``*.gguf``), an index json, or
one shard of a numbered set (``…-00002-of-00004.safetensors``, a gguf-split ``…-00001-of-00003.gguf``).

``--read heap`` reads each tensor into a fresh heap buffer; ``--read mmap`` maps the file once and
touches every page of each tensor through the mapping. It imports nothing of the workbench: it is an
external program the workbench times.
"""
import argparse
import json
import glob
import os
import re
import struct
import sys
import time

t_spawn = time.perf_counter()

import numpy as np  # noqa: E402 - the imports are part of an engine's start-up

PAGE = 4096


def phase(name, since):
    """Print one phase line as engines log them; return the start of the next phase."""
    now = time.perf_counter()
    print(f"[demo-engine] phase {name}: {(now - since) * 1e3:.3f} ms")
    return now


def model_files(path):
    """The files of the model ``path`` names, in order (see the module's docstring)."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.isfile(index):
            return model_files(index)
        for ext in (".safetensors", ".gguf"):
            found = sorted(glob.glob(os.path.join(glob.escape(path), "*" + ext)))
            if found:
                return found
        raise SystemExit(f"{path}: no model in this directory")
    if path.endswith(".json"):
        with open(path) as fh:
            names = sorted(set(json.load(fh)["weight_map"].values()))
        return [os.path.join(os.path.dirname(path), name) for name in names]
    numbered = re.match(r"^(.+)-\d{5}-of-(\d{5})(\.\w+)$", os.path.basename(path))
    if numbered:
        prefix, count, ext = numbered.group(1), int(numbered.group(2)), numbered.group(3)
        return [os.path.join(os.path.dirname(path), f"{prefix}-{i:05d}-of-{count:05d}{ext}")
                for i in range(1, count + 1)]
    return [path]


def tensor_ranges(path):
    """(name, absolute offset, bytes) of every tensor in a GGUF or safetensors file."""
    if path.endswith(".gguf"):
        from gguf import GGUFReader

        reader = GGUFReader(path)
        return [(t.name, int(t.data_offset), int(t.n_bytes)) for t in reader.tensors]
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    header.pop("__metadata__", None)
    base = 8 + length
    return [(name, base + info["data_offsets"][0], info["data_offsets"][1] - info["data_offsets"][0])
            for name, info in header.items()]


def load_heap(path, ranges):
    fd = os.open(path, os.O_RDONLY)
    try:
        out = {}
        for name, offset, nbytes in ranges:
            buf = bytearray(nbytes)
            got = os.preadv(fd, [buf], offset)
            if got != nbytes:
                raise OSError(f"{path}: short read of {name}: {got} of {nbytes} bytes")
            out[name] = np.frombuffer(buf, dtype=np.uint8)
        return out
    finally:
        os.close(fd)


def load_mmap(path, ranges):
    mapping = np.memmap(path, dtype=np.uint8, mode="r")
    out = {name: mapping[offset:offset + nbytes] for name, offset, nbytes in ranges}
    for view in out.values():
        view[::PAGE].sum()  # touch every page, as an upload out of the mapping would
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--read", choices=("heap", "mmap"), default="heap")
    parser.add_argument("--idle-s", type=float, default=60.0, help="how long to live after the ready line")
    args = parser.parse_args()
    t = phase("imports", t_spawn)
    files = model_files(args.model)
    ranges = {path: tensor_ranges(path) for path in files}
    t = phase("index", t)
    load = load_heap if args.read == "heap" else load_mmap
    tensors = {}
    for path in files:
        tensors.update(load(path, ranges[path]))
    t = phase("weights", t)
    checksum = sum(int(a[::PAGE].sum()) for a in tensors.values())
    phase("checksum", t)
    nbytes = sum(a.nbytes for a in tensors.values())
    print(f"[demo-engine] engine ready: {len(tensors)} tensors, {nbytes} bytes ({args.read}) in {len(files)} "
          f"file(s), checksum {checksum}")
    sys.stdout.flush()
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
