#!/usr/bin/env bash
# Issue 25, fourth pass, call 1 (2026-12-03): one device call, steps in priority order, each under its own limit.
#   bash docs/benchmarks/h200-2026-12-03/fourth-pass/call1/call.sh OUT     (from the repository root)
# 1. warm MoE misses: --upload-threads 4 against 1 (both pinned uploads, MADV_FREE; 8 turns x 8 tokens, n = 6 paired);
# 2. probe_staging (copy_shapes: the copy engine's rate by copy shape and slot count);
# 3. 16 GB: ring against ring spare=12 (32 slots) and ring slot_mib=16 (n = 6 interleaved): is the engine's
#    ~14 % idle a matter of depth (slots in flight) or of copy count?
# 4. the GPU test suite at this tree, in what is left.
set -uo pipefail
out=${1:?usage: call.sh OUT}
export PYTHONPATH=/tmp/site:$PWD
MISSES_CACHE=warm MISSES_PROBE_MIB=0 MISSES_TURNS=8 MISSES_TOKENS=8 MISSES_AB_LIMIT=200 \
    MISSES_ARMS="reader=pread release_advice=free uploader=pinned;reader=pread release_advice=free uploader=pinned upload_threads=4" \
    bash benchmarks/gpu_misses.sh "$out/m" > "$out/m.log" 2>&1
echo "misses: rc=$? at ${SECONDS} s"
grep -E "staged GB/s:|tok/s:|check " "$out/m/session-ab.txt" | grep -v "no ratio"; tail -4 "$out/m/ring-warm.txt" | head -2
tar czf "$out/misses.tgz" -C "$out" m m.log && rm -rf "$out/m" "$out/m.log"
dd if=/dev/urandom of=/tmp/bench/probe.bin bs=1M count=256 status=none
timeout 60 python3 benchmarks/probe_staging.py --device cuda --file /tmp/bench/probe.bin --out "$out/probe.json" > /dev/null 2>&1
echo "probe: rc=$? at ${SECONDS} s"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d.get('copy_shapes'))" "$out/probe.json"
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl
mkdir -p /tmp/wbd /tmp/sizes
timeout 200 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes full --runs 6 \
    --spec "ring" --spec "ring spare=12" --spec "ring slot_mib=16" --out /tmp/sizes/big > "$out/big.log" 2>&1
echo "big: rc=$? at ${SECONDS} s"; cat /tmp/sizes/big/bench.md 2>/dev/null | grep -E "^\| |^walls"
python3 - /tmp/sizes/big/bench.json <<'PY' 2>/dev/null
import json, sys
for model in json.load(open(sys.argv[1]))["models"]:
    for r in model["rows"]:
        print(r["spec"], {k: round(v / 1e3, 1) for k, v in r["counters"].items() if v})
PY
tar czf "$out/big.tgz" -C /tmp/sizes big "$out/big.log" 2>/dev/null; rm -f "$out/big.log"
left=$(( 560 - SECONDS ))
(( left > 60 )) && bash benchmarks/gpu_session.sh "$out/t" tests=$left > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
