#!/usr/bin/env bash
# Issue 25's H200 call, every step in one command (the lease allows one call of ~9 minutes):
#
#     bash benchmarks/gpu/gpu_sizes.sh OUT [DEADLINE_S]
#
# Steps, each cut by `timeout` at its limit or at what is left of DEADLINE_S (default 540), so a slow
# step cannot take the next ones with it (a step with < 20 s left is skipped, and said so); the output
# is always written:
#   probe  — benchmarks/probe/probe_staging.py on a 256 MiB scratch file (first touch by 1/4/16 threads, ...)
#   dense  — bench_sizes: ring (readers-made slots, fitted) / ring fitted with upfront slots / the ring
#            before issue 25 (fit=0 provision=upfront) at 64 MiB, 256 MiB, 1 GiB, 2 GiB, n=6
#   moe    — the 2 GiB A3B-like MoE GGUF: ring, experts, the old ring, n=6
#   peers  — ring against InstantTensor's buffered mode (the best peer warm) at 256 MiB, 2 GiB, 1 GiB, n=6
#   big    — the full 16 GB Llama-3-8B-shaped checkpoint: ring against the old ring, n=3
# Files in OUT: machine.txt, probe.json, summary.md (every step's bench.md), results.tgz (their
# bench.json), all.log. Run from a checkout with PYTHONPATH holding it and the wheels (gpu_session.sh).
# Environment (defaults: the first call's, 2026-12-03 11:13): SIZES_STEPS (which steps, in order),
# DENSE_SIZES, and the configs of each step as |-separated lists: DENSE_SPECS, MOE_SPECS, PEER_SPECS,
# BIG_SPECS (the first of each list is its table's baseline); BIG_RUNS (the big step's n, default 3).
# The second call (first-read slots, the same day): SIZES_STEPS="dense moe"
# DENSE_SPECS="ring provision=first-read|ring provision=readers|ring provision=upfront" MOE_SPECS="ring provision=first-read|ring provision=readers|experts provision=first-read|experts".
set -uo pipefail
out=${1:?usage: gpu_sizes.sh OUT [DEADLINE_S]}
deadline=${2:-540}
cd "$(dirname "$0")/../.."
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
specs() {  # "A|B|C" -> --spec A --spec B --spec C
  local IFS='|' x; for x in $1; do printf '%s\0%s\0' --spec "$x"; done
}
run_specs() {  # NAME LIMIT SPECS BENCH-ARGS...: bench_sizes.py with each config of SPECS
  local name=$1 limit=$2 list=$3; shift 3
  local args=(); while IFS= read -r -d '' a; do args+=("$a"); done < <(specs "$list")
  rm -rf "/tmp/sizes/$name"  # a box kept from an earlier call: only this call's results go in OUT
  step "$name" "$limit" python3 benchmarks/bench/bench_sizes.py --device "${SIZES_DEVICE:-cuda}" --dir "${SIZES_DIR:-/tmp/bench}" "$@" "${args[@]}" --out "/tmp/sizes/$name"
}
for s in ${SIZES_STEPS:-probe dense moe peers big}; do
  case $s in
    probe) dd if=/dev/urandom of=/tmp/bench/probe.bin bs=1M count=256 status=none
           step probe 40 python3 benchmarks/probe/probe_staging.py --device cuda --file /tmp/bench/probe.bin --out "$out/probe.json" ;;
    dense) run_specs dense 200 "${DENSE_SPECS:-$R|$U|$O}" --sizes "${DENSE_SIZES:-64MiB,256MiB,1GiB,2GiB}" --runs 6 ;;
    moe)   run_specs moe 80 "${MOE_SPECS:-$R|experts|$O}" --sizes "" --moe 2GiB --runs 6 ;;
    peers) run_specs peers 110 "${PEER_SPECS:-$R|peer-instanttensor direct=0}" --sizes "${PEER_SIZES:-256MiB,2GiB,1GiB}" --runs 6 ;;
    big)   run_specs big 200 "${BIG_SPECS:-$R|$O}" --sizes full --runs "${BIG_RUNS:-3}" ;;
    *)     echo "gpu_sizes.sh: unknown step '$s' (probe dense moe peers big)" >&2; exit 2 ;;
  esac
done
for s in ${SIZES_STEPS:-dense moe peers big}; do [ -f /tmp/sizes/$s/bench.md ] && { echo "## $s"; cat /tmp/sizes/$s/bench.md; }; done > "$out/summary.md"
steps=(${SIZES_STEPS:-dense moe peers big}); tar -czf "$out/results.tgz" -C /tmp/sizes "${steps[@]}" 2>/dev/null
tail -c 2000 "$out/summary.md"
