#!/usr/bin/env bash
# Issue 25, fourth pass, call 3 (2026-12-03): the final main's defaults (mapping=one) at every size, the copy engine
# under readers writing its own slots, and the GPU test suite.
#   bash docs/benchmarks/h200-2026-12-03/fourth-pass/call3/call.sh OUT     (from the repository root)
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="dense moe" DENSE_SIZES=256MiB,1GiB,2GiB DENSE_SPECS="ring" MOE_SPECS="ring|experts" \
    bash benchmarks/gpu_sizes.sh "$out/s" 120 > /dev/null 2>&1
echo "sizes: at ${SECONDS} s"; grep -E "^\| |^### |^walls" "$out/s/summary.md"
timeout 60 python3 benchmarks/probe_contention.py --device cuda --file /tmp/bench/bench-dense-bf16-2048MiB.safetensors \
    --readers 0,8,12,16 --into-slots --out "$out/contention.json" > /dev/null 2>&1
echo "contention: rc=$? at ${SECONDS} s"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, v) for k, v in d.items() if k.startswith(('readers', 'engine'))]" "$out/contention.json"
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl
mkdir -p /tmp/wbd /tmp/sizes
timeout 150 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes full --runs 6 \
    --spec "ring" --out /tmp/sizes/big > "$out/big.log" 2>&1
echo "big: rc=$? at ${SECONDS} s"; grep -E "^\| |^walls" /tmp/sizes/big/bench.md
cp "$out/big.log" /tmp/sizes/big/ 2>/dev/null; tar czf "$out/big.tgz" -C /tmp/sizes big; rm -f "$out/big.log"
tar czf "$out/sizes.tgz" -C "$out" s && rm -rf "$out/s"
left=$(( 570 - SECONDS ))
(( left > 60 )) && bash benchmarks/gpu_session.sh "$out/t" tests=$left > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
