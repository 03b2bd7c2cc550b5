#!/usr/bin/env bash
# Issue 25, "MoE sessions", on the H200 (one call of the device tool, ≤ 600 s): where a cold session's
# misses stop against the disk. The 2-core VM's results and what they mean: docs/benchmarks/session-misses-host.md.
#
#     bash benchmarks/gpu/gpu_misses.sh OUT
#
# 1. the 2 GiB MoE GGUF of issue 25 (64 experts, alignment 64), written once to /tmp/bench (MISSES_DIR);
# 2. this box's walls (`workbench ceilings`, 16 threads, the model read whole too): the disk wall each
#    session turn is held against;
# 3. benchmarks/probe/probe_slices.py: random expert-slice reads (O_DIRECT, buffered, buffered FADV_RANDOM) by
#    threads and read size — is the disk's random-read rate the limit, or depth, or read size?
# 4. the session A/B, cold before every cell, 4 lanes + overlap, n = 6 ABBA, every landed slice verified:
#    the O_DIRECT in-place reader (the default) against buffered pread, pread-random and 16 lanes.
#    Every turn's line holds its misses' GB/s against its wall (the ledger export keeps each turn).
# Budget (≤ 600 s): model write ≤ 40 s, ceilings ≈ 30 s, probe (27 cases × 192 MiB) ≤ 150 s, 24 cells ×
# ≈ 11 s (worker + CUDA ≈ 8 s, 3 turns × 4 tokens) ≈ 270 s, cut at 340 s (finished cells stay in the ledger).
# A smaller call: MISSES_PROBE_MIB=0 (no probe), MISSES_ROUNDS=4, MISSES_AB_LIMIT (the A/B's cut, s).
# MISSES_CACHE=warm: the page cache warm before every cell, buffered readers only, and `ring`'s warm rate on
# the same file first (the goal's other half: misses at >= 0.8 x the ring's rate warm).
# MISSES_ARMS: the A/B's arms instead of the defaults, ';'-separated, the first the baseline, e.g.
# MISSES_ARMS="reader=pread;reader=pread release_advice=free" (the cache's MADV_FREE release against MADV_DONTNEED);
# MISSES_TURNS, MISSES_TOKENS: the session's shape (default 3 × 4).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu_misses.sh OUT}
dir=${MISSES_DIR:-/tmp/bench}
mkdir -p "$out" "$dir"
export PYTHONPATH=$PWD
if compgen -G ".whl/*.whl" >/dev/null; then  # the wheels the image lacks (gguf: the GGUF index), as gpu_session.sh
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
export WORKBENCH_LEDGER=$dir/misses.sqlite WORKBENCH_LOCK_DIR=$dir/locks PYTHONUNBUFFERED=1
size=${MISSES_SIZE:-2GiB} device=${MISSES_DEVICE:-cuda}  # MISSES_SIZE=64MiB MISSES_DEVICE=host: a dry run anywhere
model=$dir/misses-$size-e64.gguf
wb=(python3 -m workbench.cli)
{ date -u +%FT%TZ; nproc; uname -r; cat /proc/loadavg; } > "$out/machine.txt"
[ -f "$model" ] || timeout 60 "${wb[@]}" synth "$model" --format gguf --layout moe --size "$size" --experts 64 --alignment 64 --seed 11
timeout 90 "${wb[@]}" ceilings --dir $dir --size "$size" --threads 16 --file "$model" > "$out/ceilings.txt" 2>&1
if [ "${MISSES_PROBE_MIB:-192}" != 0 ]; then  # MISSES_PROBE_MIB=0: no probe (a call that has no room for it)
    timeout 150 python3 benchmarks/probe/probe_slices.py "$model" --threads 1,4,16 --mib "${MISSES_PROBE_MIB:-192}" \
        --out "$out/probe-slices.json" > /dev/null 2> "$out/probe-slices.txt"
fi
cache=${MISSES_CACHE:-cold}
if [ "$cache" = warm ]; then  # warm: O_DIRECT reads the disk whatever the cache holds, so buffered readers only,
    # and the ring's warm rate on the same file in the same call (the goal: misses at >= 0.8 x it)
    timeout 120 "${wb[@]}" run "$model" --strategy ring --device "$device" --cache warm --runs 6 \
        --campaign i25-misses-warm > "$out/ring-warm.txt" 2>&1
    readers=(--ab "reader=pread" --ab "reader=pread-random" --ab "reader=pread lanes=16")
else
    readers=(--ab "reader=direct-inplace" --ab "reader=pread" --ab "reader=pread-random" --ab "lanes=16")
fi
if [ -n "${MISSES_ARMS:-}" ]; then
    IFS=';' read -ra arms <<< "$MISSES_ARMS"
    readers=()
    for arm in "${arms[@]}"; do readers+=(--ab "$arm"); done
fi
timeout "${MISSES_AB_LIMIT:-340}" "${wb[@]}" session "$model" --device "$device" --cache "$cache" --lanes 4 --overlap \
    --turns "${MISSES_TURNS:-3}" --tokens "${MISSES_TOKENS:-4}" "${readers[@]}" --rounds "${MISSES_ROUNDS:-6}" --campaign "i25-misses-$cache" > "$out/session-ab.txt" 2>&1
echo "session A/B exit $?" >> "$out/session-ab.txt"
cat /proc/loadavg >> "$out/machine.txt"
"${wb[@]}" ledger export --csv "$out/ledger" > /dev/null 2>&1
tail -25 "$out/session-ab.txt"
