#!/usr/bin/env bash
# Issue 25, fifth pass, call 5 (2026-12-03): `ring start=together` against the default once more, n = 10, at
# 256 MiB, 1 GiB, 2 GiB and the MoE GGUF on one box (calls 1 and 3 disagreed at 1 GiB and 16 GB; call 3 had
# 2 GiB at 1.11x [1.00-1.17]).
#   bash docs/benchmarks/h200-2026-12-03/fifth-pass/call5/call.sh OUT     (from the repository root)
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
cp "$out/x/machine.txt" "$out/machine.txt"; rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl
mkdir -p /tmp/wbd /tmp/sizes /tmp/bench
timeout 330 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes 256MiB,1GiB,2GiB --moe 2GiB --runs 10 \
    --spec "ring" --spec "ring start=together" --out /tmp/sizes/t > "$out/t.log" 2>&1
echo "together: rc=$? at ${SECONDS} s"; grep -E "^\| |^### |^walls" /tmp/sizes/t/bench.md
python3 - /tmp/sizes/t/bench.json <<'PY'
import json, sys
for model in json.load(open(sys.argv[1]))["models"]:
    for r in model["rows"]:
        print(model["file"][:34], r["spec"], {k: round(v / 1e3, 1) for k, v in r["counters"].items() if v})
PY
tar czf "$out/together.tgz" -C /tmp/sizes t -C "$out" t.log && rm -f "$out/t.log"
