#!/usr/bin/env bash
# Issue 25, fifth pass, call 6 (2026-12-03): start=together is now ring's default. 16 GB: the new default against
# start=each (n = 6 interleaved), then the GPU test suite at this tree in what is left.
#   bash docs/benchmarks/h200-2026-12-03/fifth-pass/call6/call.sh OUT     (from the repository root)
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
cp "$out/x/machine.txt" "$out/machine.txt"; rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="big" BIG_RUNS=6 BIG_SPECS="ring start=each|ring" bash benchmarks/gpu_sizes.sh "$out/s" 150 > /dev/null 2>&1
echo "big: at ${SECONDS} s"; grep -E "^\| |^### |^walls" "$out/s/summary.md"
tar czf "$out/big.tgz" -C "$out" s && rm -rf "$out/s"
left=$(( 350 - SECONDS ))
(( left > 60 )) && bash benchmarks/gpu_session.sh "$out/t" tests=$left > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
