#!/usr/bin/env bash
# Issue 25, fourth pass, call 4 (2026-12-03): each reader's life (lived_us) against its timed parts, and the spread
# of the readers' ends (end_spread_us), at 256 MiB / 1 GiB / 2 GiB (n = 6) and 16 GB (n = 3), the final defaults.
#   bash docs/benchmarks/h200-2026-12-03/fourth-pass/call4/call.sh OUT     (from the repository root)
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="dense big" DENSE_SIZES=256MiB,1GiB,2GiB DENSE_SPECS="ring" BIG_SPECS="ring" \
    bash benchmarks/gpu_sizes.sh "$out/s" 150 > /dev/null 2>&1
echo "sizes: at ${SECONDS} s"; grep -E "^\| |^### |^walls" "$out/s/summary.md"
python3 - "$out/s/results.tgz" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    for m in t.getmembers():
        if m.name.endswith("bench.json"):
            for model in json.load(t.extractfile(m))["models"]:
                for r in model["rows"]:
                    print(model["file"][:34], r["spec"], {k: round(v / 1e3, 1) for k, v in r["counters"].items() if v})
PY
tar czf "$out/sizes.tgz" -C "$out" s && rm -rf "$out/s"
