"""An engine that claims a model it never reads: it reads as many bytes from another file (``/dev/zero``,
or a copy of the model: same size, same bytes, another inode) through read calls, prints the ready
line, and idles. Its process counters look like a load of the model; nothing of the model's own files
moves. The workbench must show it as time only."""
import argparse
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source", help="what it really reads")
    parser.add_argument("nbytes", type=int, help="how many bytes (the model's size)")
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    fd = os.open(args.source, os.O_RDONLY)
    left = args.nbytes
    while left > 0:
        got = len(os.read(fd, min(left, 1 << 20)))
        if got == 0:
            break
        left -= got
    print(f"[impostor] model ready: {args.nbytes - left} bytes", flush=True)
    time.sleep(args.idle_s)


if __name__ == "__main__":
    sys.exit(main())
