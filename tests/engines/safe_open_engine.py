"""A small engine for the tests that loads a sharded safetensors set the way torch code does: every
shard of ``model.safetensors.index.json`` opened with ``safetensors.safe_open(framework="pt")`` and every
tensor taken with ``get_tensor`` (torch tensors backed by the shard's mapping, as ``load_file`` returns
them), then used once — a pass over each tensor's bytes, as a CPU engine's warm-up or an upload would
make — before the ready line; the weights stay where they were loaded until it is killed.

``--keep K`` makes it a streaming loader instead: each tensor is copied out (as an upload to a device
would), and a shard's mapping is released once the K shards after it are read — at most K+1 shards
mapped at once (K=1: the shard before, kept until the next one is read, as a pipelined upload keeps
its source until the copy is done)."""
import argparse
import json
import os
import sys
import time

import torch
from safetensors import safe_open


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", help="the set's directory (its model.safetensors.index.json)")
    parser.add_argument("--keep", type=int, default=None, help="stream: release a shard K shards later")
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    with open(os.path.join(args.directory, "model.safetensors.index.json")) as fh:
        shards = sorted(set(json.load(fh)["weight_map"].values()))
    weights, checksum, sources = {}, 0, []
    for shard in shards:
        with safe_open(os.path.join(args.directory, shard), framework="pt") as f:
            mapped = {name: f.get_tensor(name) for name in f.keys()}
        for name, tensor in mapped.items():
            checksum += int(tensor.reshape(-1).view(torch.uint8).sum())
            weights[name] = tensor if args.keep is None else tensor.clone()
        sources.append(mapped)
        if args.keep is not None and len(sources) > args.keep:
            sources.pop(0).clear()  # the shard K back: its tensors (and so its mapping) released
    nbytes = sum(t.numel() * t.element_size() for t in weights.values())
    print(f"[safe-open] model ready: {len(weights)} tensors, {nbytes} bytes, checksum {checksum}", flush=True)
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
