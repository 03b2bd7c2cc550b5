#!/usr/bin/env bash
# Issue 25's H200 call, every step in one command (the lease allows one call of ~9 minutes):
#
#     bash benchmarks/gpu_sizes.sh OUT [DEADLINE_S]
#
# Steps, each cut by `timeout` at its limit or at what is left of DEADLINE_S (default 540), so a slow
# step cannot take the next ones with it (a step with < 20 s left is skipped, and said so); the output
# is always written:
#   probe  — benchmarks/probe_staging.py on a 256 MiB scratch file (first touch by 1/4/16 threads, ...)
#   dense  — bench_sizes: ring (readers-made slots, fitted) / ring fitted with upfront slots / the ring
#            before issue 25 (fit=0 provision=upfront) at 64 MiB, 256 MiB, 1 GiB, 2 GiB, n=6
#   moe    — the 2 GiB A3B-like MoE GGUF: ring, experts, the old ring, n=6
#   peers  — ring against InstantTensor's buffered mode (the best peer warm) at 256 MiB, 2 GiB, 1 GiB, n=6
#   big    — the full 16 GB Llama-3-8B-shaped checkpoint: ring against the old ring, n=3
# Files in OUT: machine.txt, probe.json, summary.md (every step's bench.md), results.tgz (their
# bench.json), all.log. Run from a checkout with PYTHONPATH holding it and the wheels (gpu_session.sh).
set -uo pipefail
out=${1:?usage: gpu_sizes.sh OUT [DEADLINE_S]}
deadline=${2:-540}
cd "$(dirname "$0")/.."
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl PYTHONUNBUFFERED=1
mkdir -p /tmp/wbd /tmp/bench /tmp/sizes "$out"
{ date -u; nproc; uname -r; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  cat /sys/kernel/mm/transparent_hugepage/enabled; grep -E 'MemTotal|MemAvailable' /proc/meminfo
  python3 -c 'import sys, importlib.metadata as m; print(sys.version.split()[0], *(f"{d} {m.version(d)}" for d in ("cuda-bindings", "torch", "instanttensor")))'
  df -T /tmp | tail -1; uptime; } > "$out/machine.txt" 2>&1
step() {  # NAME LIMIT CMD...: run CMD under min(LIMIT, what is left of the deadline)
  local name=$1 limit=$2; shift 2
  local left=$(( deadline - SECONDS - 5 ))
  (( left < limit )) && limit=$left
  if (( limit < 20 )); then echo "== $name: skipped, ${left} s left" | tee -a "$out/all.log"; return; fi
  echo "== $name (limit ${limit} s, at ${SECONDS} s, load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/all.log"
  timeout "$limit" "$@" >> "$out/all.log" 2>&1
  echo "== $name: rc=$? at ${SECONDS} s" | tee -a "$out/all.log"
}
R="ring provision=readers"; U="ring provision=upfront"; O="ring fit=0 provision=upfront"
dd if=/dev/urandom of=/tmp/bench/probe.bin bs=1M count=256 status=none
step probe 40 python3 benchmarks/probe_staging.py --device cuda --file /tmp/bench/probe.bin --out "$out/probe.json"
step dense 200 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes 64MiB,256MiB,1GiB,2GiB \
  --runs 6 --spec "$R" --spec "$U" --spec "$O" --out /tmp/sizes/dense
step moe 80 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes "" --moe 2GiB --runs 6 \
  --spec "$R" --spec experts --spec "$O" --out /tmp/sizes/moe
step peers 110 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes ${PEER_SIZES:-256MiB,2GiB,1GiB} --runs 6 \
  --spec "$R" --spec "peer-instanttensor direct=0" --out /tmp/sizes/peers
step big 200 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes full --runs 3 \
  --spec "$R" --spec "$O" --out /tmp/sizes/big
for s in dense moe peers big; do [ -f /tmp/sizes/$s/bench.md ] && { echo "## $s"; cat /tmp/sizes/$s/bench.md; }; done > "$out/summary.md"
tar -czf "$out/results.tgz" -C /tmp/sizes . 2>/dev/null
tail -c 2000 "$out/summary.md"
