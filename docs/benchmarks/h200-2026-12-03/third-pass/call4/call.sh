#!/usr/bin/env bash
# Issue 25, third pass, call 4 (2026-12-03): the defaults at the final main, every size, with slot-making split
# into mapping and registering (register_us). From the repository root: bash .../call4.sh OUT
set -uo pipefail
out=${1:?usage: call4.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site (the step is cut at 1 s)
rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="dense moe big" DENSE_SIZES=256MiB,1GiB,2GiB DENSE_SPECS="ring" MOE_SPECS="ring|experts" BIG_SPECS="ring" \
    bash benchmarks/gpu_sizes.sh "$out/s" 330 > /dev/null 2>&1
grep -E "^\| |^### |^walls" "$out/s/summary.md"
python3 - "$out/s" <<'PY'
import json, sys, tarfile, io
with tarfile.open(f"{sys.argv[1]}/results.tgz") as t:
    for m in t.getmembers():
        if m.name.endswith("bench.json"):
            for model in json.load(t.extractfile(m))["models"]:
                for r in model["rows"]:
                    c = r["counters"]
                    print(model["file"][:34], r["spec"], {k: round(v / 1e3, 1) for k, v in c.items() if v})
PY
tar czf "$out/sizes.tgz" -C "$out" s && rm -rf "$out/s"
