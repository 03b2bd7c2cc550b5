"""A real engine for the tests: Hugging Face transformers' ``from_pretrained`` on a checkpoint directory,
then the ready line; it idles until killed. ``--dtype float32`` on a bf16 checkpoint makes it convert
(read) every weight inside ``from_pretrained``; ``--dtype bfloat16`` lets transformers keep the weights
in the shards' mappings without reading them (a lazy load on the CPU); ``--warmup`` then makes one pass
over every weight before the ready line, as engines run a warm-up before they report ready."""
import argparse
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--warmup", action="store_true")
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.directory, dtype=getattr(torch, args.dtype))
    if args.warmup:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.float().sum()
    print(f"[transformers] model ready: {sum(p.numel() for p in model.parameters())} parameters", flush=True)
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
