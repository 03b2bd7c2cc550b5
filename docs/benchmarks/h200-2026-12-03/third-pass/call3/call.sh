#!/usr/bin/env bash
# Issue 25, third pass, call 3 (2026-12-03): one device call, steps in priority order, each under its own limit.
#   bash docs/benchmarks/h200-2026-12-03/third-pass/call3/call.sh OUT     (from the repository root)
# 1. warm MoE misses, the cache's MADV_FREE release against MADV_DONTNEED (8 turns x 8 tokens, n = 6 a side);
# 2. the GPU test suite at this tree; 3. probe_staging (each of a load's first 6 MiB registrations);
# 4. fewer readers at 256 MiB and 1 GiB (ring threads=4 / threads=6 against the default).
set -uo pipefail
out=${1:?usage: call.sh OUT}
export PYTHONPATH=/tmp/site:$PWD
MISSES_CACHE=warm MISSES_PROBE_MIB=0 MISSES_TURNS=8 MISSES_TOKENS=8 MISSES_AB_LIMIT=220 \
    MISSES_ARMS="reader=pread;reader=pread release_advice=free" bash benchmarks/gpu_misses.sh "$out/m" > "$out/m.log" 2>&1
echo "misses: rc=$? at ${SECONDS} s"
grep -E "staged GB/s:|tok/s:|check " "$out/m/session-ab.txt" | grep -v "no ratio"; tail -4 "$out/m/ring-warm.txt" | head -2
tar czf "$out/misses.tgz" -C "$out" m m.log && rm -rf "$out/m" "$out/m.log"
bash benchmarks/gpu_session.sh "$out/t" tests=200 > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
dd if=/dev/urandom of=/tmp/bench/probe.bin bs=1M count=256 status=none
timeout 40 python3 benchmarks/probe_staging.py --device cuda --file /tmp/bench/probe.bin --out "$out/probe.json" > /dev/null 2>&1
echo "probe: rc=$? at ${SECONDS} s"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, v) for k, v in d.items() if k.startswith('register')]" "$out/probe.json"
left=$(( 560 - SECONDS ))
SIZES_STEPS=dense DENSE_SIZES=256MiB,1GiB DENSE_SPECS="ring|ring threads=4|ring threads=6" bash benchmarks/gpu_sizes.sh "$out/s" "$left" > /dev/null 2>&1
echo "sizes: at ${SECONDS} s"; grep -E "^\| |^### |^walls" "$out/s/summary.md"
tar czf "$out/sizes.tgz" -C "$out" s && rm -rf "$out/s"
