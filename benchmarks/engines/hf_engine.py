"""A real engine for the engine A/B benchmark: Hugging Face transformers loading a local Llama-shaped
model directory onto a device, its own phase lines printed as it goes, then idling until killed.

    python hf_engine.py MODEL_DIR --device cuda --load direct|via-cpu [--idle-s 60]

``--load direct`` passes ``device_map=DEVICE`` (transformers materializes the safetensors weights on
the device); ``--load via-cpu`` loads onto the CPU and then moves the model with ``.to(DEVICE)``.
Lines: ``phase imports``, ``phase device_init`` (CUDA context), then ``load start`` (the benchmark's
start marker), ``phase config``, ``phase weights``, ``phase to_device`` (via-cpu), and the ready line
``model loaded: …``. It never touches the network (offline flags set before the imports).
"""
import argparse
import os
import sys
import time

t_spawn = time.perf_counter()
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network on the benchmark box: never wait for one
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def phase(name, since):
    now = time.perf_counter()
    print(f"[hf-engine] phase {name}: {(now - since) * 1e3:.1f} ms", flush=True)
    return now


def sync(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--load", choices=("direct", "via-cpu"), default="direct")
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    t = phase("imports", t_spawn)
    if args.device.startswith("cuda"):
        torch.zeros(1, device=args.device)  # the CUDA context, before the load window
        sync(args.device)
    t = phase("device_init", t)
    print("[hf-engine] load start", flush=True)
    t = time.perf_counter()
    config = AutoConfig.from_pretrained(args.model_dir)
    t = phase("config", t)
    target = args.device if args.load == "direct" else "cpu"
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, config=config, dtype=torch.bfloat16,
                                                 device_map=target)
    sync(args.device)
    t = phase("weights", t)
    if args.load == "via-cpu":
        model = model.to(args.device)
        sync(args.device)
        t = phase("to_device", t)
    params = sum(p.numel() for p in model.parameters())
    where = {str(p.device) for p in model.parameters()}
    print(f"[hf-engine] model loaded: {params} parameters on {','.join(sorted(where))} ({args.load})", flush=True)
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
