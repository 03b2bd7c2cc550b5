#!/usr/bin/env bash
# Issue 25, fifth pass, call 4 (2026-12-03): what starting the readers costs on the H200 box, by how they are started
# (benchmarks/probe_threads.py: one by one idle / one by one busy / busy with a 0.1 ms switch interval / a tree).
#   bash docs/benchmarks/h200-2026-12-03/fifth-pass/call4/call.sh OUT     (from the repository root)
set -uo pipefail
out=${1:?usage: call.sh OUT}
{ date -u +%FT%TZ; nproc; uname -r; cat /proc/loadavg; python3 -V; } > "$out/machine.txt"
mkdir -p /tmp/bench && dd if=/dev/urandom of=/tmp/bench/probe.bin bs=1M count=256 status=none
export PYTHONPATH=$PWD
timeout 120 python3 benchmarks/probe_threads.py --device none --file /tmp/bench/probe.bin --threads 8,15,16 --repeat 15 \
    --out "$out/threads.json" > /dev/null 2> "$out/threads.err"
echo "threads: rc=$? at ${SECONDS} s"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, v) for k, v in d.items()]" "$out/threads.json"
tail -3 "$out/threads.err"
