#!/usr/bin/env bash
# Issue 25, fifth pass, call 1 (2026-12-03): one device call, steps in priority order, each under its own limit.
#   bash docs/benchmarks/h200-2026-12-03/fifth-pass/call1/call.sh OUT     (from the repository root)
# 1. `ring start=together` against the default (start=each) at 256 MiB, 1 GiB, 2 GiB, the MoE GGUF (n = 6) and
#    16 GB (n = 3), with start_spread_us / end_spread_us / lived_us in the counters;
# 2. warm MoE misses, --upload-threads 4 against 1, with each cell's `cores busy` (one lock or memory traffic?);
# 3. the GPU test suite at this tree, in what is left.
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
cp "$out/x/machine.txt" "$out/machine.txt"; rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="dense moe big" DENSE_SIZES=256MiB,1GiB,2GiB DENSE_SPECS="ring|ring start=together" \
    MOE_SPECS="ring|ring start=together" BIG_SPECS="ring|ring start=together" \
    bash benchmarks/gpu_sizes.sh "$out/s" 300 > /dev/null 2>&1
echo "sizes: at ${SECONDS} s"; grep -E "^\| |^### |^## |^walls" "$out/s/summary.md"
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
MISSES_CACHE=warm MISSES_PROBE_MIB=0 MISSES_TURNS=8 MISSES_TOKENS=8 MISSES_AB_LIMIT=150 \
    MISSES_ARMS="reader=pread release_advice=free uploader=pinned;reader=pread release_advice=free uploader=pinned upload_threads=4" \
    bash benchmarks/gpu_misses.sh "$out/m" > "$out/m.log" 2>&1
echo "misses: rc=$? at ${SECONDS} s"
grep -E "cores busy|staged GB/s:|tok/s:|check " "$out/m/session-ab.txt" | grep -v "no ratio"; tail -4 "$out/m/ring-warm.txt" | head -2
tar czf "$out/misses.tgz" -C "$out" m m.log && rm -rf "$out/m" "$out/m.log"
left=$(( 575 - SECONDS ))
(( left > 60 )) && bash benchmarks/gpu_session.sh "$out/t" tests=$left > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
