"""A deliberately slower engine for the tests: parses the safetensors header itself, reads each tensor
in small pieces into a heap buffer, copies it once more into a numpy array, and stalls on purpose
(``--stall-ms``) — every cost printed as its own phase line, so the phase bars show why it loses."""
import argparse
import json
import os
import struct
import sys
import time

t_spawn = time.perf_counter()

import numpy as np  # noqa: E402

PIECE = 64 << 10  # small reads: many syscalls, no readahead help from large requests


def phase(name, since):
    now = time.perf_counter()
    print(f"[engine] phase {name}: {(now - since) * 1e3:.3f} ms")
    return now


def read_header(fd):
    (length,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    header = json.loads(os.pread(fd, length, 8))
    header.pop("__metadata__", None)
    return header, 8 + length


def read_tensor(fd, start, end):
    buf = bytearray(end - start)
    view = memoryview(buf)
    pos = 0
    while pos < len(buf):
        got = os.preadv(fd, [view[pos:pos + PIECE]], start + pos)
        if got <= 0:
            raise OSError(f"short read at {start + pos}")
        pos += got
    return np.frombuffer(buf, dtype=np.uint8).copy()  # the extra copy is part of the slowness


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--stall-ms", type=float, default=300.0, help="a deliberate stall before the weights")
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    t = phase("imports", t_spawn)
    fd = os.open(args.file, os.O_RDONLY)
    header, base = read_header(fd)
    t = phase("header", t)
    time.sleep(args.stall_ms / 1000)
    t = phase("stall", t)
    tensors = {name: read_tensor(fd, base + info["data_offsets"][0], base + info["data_offsets"][1])
               for name, info in header.items()}
    t = phase("weights", t)
    os.close(fd)
    nbytes = sum(a.nbytes for a in tensors.values())
    print(f"[engine] model ready: {len(tensors)} tensors, {nbytes} bytes")
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
