#!/usr/bin/env bash
# Issue 25, fifth pass, call 3 (2026-12-03), right after call 2 on the same box:
# 1. the cold MoE session A/B at n = 6: the default reader (direct-inplace) against pread-random, 16 lanes, and both;
# 2. `ring start=together` against the default again, n = 10, at 256 MiB and 2 GiB (call 1's box was noisy).
set -uo pipefail
out=${1:?usage: call.sh OUT}
MISSES_CACHE=cold MISSES_PROBE_MIB=0 MISSES_ROUNDS=6 MISSES_AB_LIMIT=230 \
    MISSES_ARMS="reader=direct-inplace;reader=pread-random;lanes=16;reader=pread-random lanes=16" \
    bash benchmarks/gpu_misses.sh "$out/m" > "$out/m.log" 2>&1
echo "misses: rc=$? at ${SECONDS} s"; cp "$out/m/machine.txt" "$out/machine.txt"
grep -E "^cold_read" "$out/m/ceilings.txt"
grep -E "GB/s:|tok/s:|check " "$out/m/session-ab.txt" | grep -v "no ratio" | cut -c1-220
tar czf "$out/misses.tgz" -C "$out" m m.log && rm -rf "$out/m" "$out/m.log"
export PYTHONPATH=/tmp/site:$PWD
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl
mkdir -p /tmp/wbd /tmp/sizes
timeout 200 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes 256MiB,2GiB --runs 10 \
    --spec "ring" --spec "ring start=together" --out /tmp/sizes/t > "$out/t.log" 2>&1
echo "together: rc=$? at ${SECONDS} s"; grep -E "^\| |^### |^walls" /tmp/sizes/t/bench.md
tar czf "$out/together.tgz" -C /tmp/sizes t -C "$out" t.log && rm -f "$out/t.log"
