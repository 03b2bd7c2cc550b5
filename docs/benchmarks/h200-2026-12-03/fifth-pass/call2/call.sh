#!/usr/bin/env bash
# Issue 25, fifth pass, call 2 (2026-12-03): cold MoE misses on the H200, where they stop against the disk.
#   bash docs/benchmarks/h200-2026-12-03/fifth-pass/call2/call.sh OUT     (from the repository root)
# benchmarks/gpu_misses.sh, cold: the 2 GiB MoE GGUF (64 experts), this box's walls (`workbench ceilings`),
# benchmarks/probe_slices.py (O_DIRECT / buffered / FADV_RANDOM random slice reads by threads 1, 4, 16 and read
# size, 192 MiB a case; never run on the H200 before), then the cold session A/B (direct-inplace, pread,
# pread-random, 16 lanes; 3 rounds ABBA; 3 turns x 4 tokens; cut at 200 s, finished cells kept).
set -uo pipefail
out=${1:?usage: call.sh OUT}
MISSES_CACHE=cold MISSES_PROBE_MIB=192 MISSES_ROUNDS=3 MISSES_AB_LIMIT=200 \
    bash benchmarks/gpu_misses.sh "$out/m" > "$out/m.log" 2>&1
echo "misses: rc=$? at ${SECONDS} s"
cp "$out/m/machine.txt" "$out/machine.txt"
grep -E "cold|disk|read" "$out/m/ceilings.txt" | head -12
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d, indent=None)[:3000])" "$out/m/probe-slices.json"
grep -E "round|GB/s:|tok/s:|check " "$out/m/session-ab.txt" | grep -v "no ratio" | cut -c1-220
tar czf "$out/misses.tgz" -C "$out" m m.log && rm -rf "$out/m" "$out/m.log"
