#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks/*-h200.md and docs/hardening/README.md, in the order and with
# the limits they were recorded with (the lent H200, 2026-12-01), one step or several per call:
#
#     bash benchmarks/gpu/gpu_session.sh OUT STEP [STEP ...]
#
# STEP: tests | experts-loads | engine-ab | load-warm | load-cold | experts-session | expert-path | expert-path-cold |
#       session-ab | session-pressure | session-prefetch | session-miss | miss-breakdown | sharded-warm | sharded-cold | evidence | evidence-corpus
#       | ranks-smoke | ranks-70b-write | ranks-scaling (issue 36: loads across ranks, docs/multi-gpu.md)
# Each step writes its report, log and ledger export under OUT and is cut by `timeout` at its limit, so a
# slow step cannot take the next ones with it. Wheels the image lacks (gguf, fastsafetensors,
# runai-model-streamer, instanttensor, plotly for python 3.12) are installed from ./.whl when it exists;
# the checkout goes on PYTHONPATH (spawned workers inherit it). Model files go to /tmp/bench and are reused.
#
# Limits (s) are in LIMIT below; their sum is far more than one lease's 30 minutes of device time (and
# one call's 10): pick a few steps per call (the script warns past 1,740 s), each call right after the
# last so the machine (and /tmp/bench's model files) is still there. Issue 17/20's run on 2026-12-02:
# `tests sharded-warm`, then `sharded-cold`, then (2 GiB, 3 rounds, 12 turns: what the lease had left)
# The peers' rerun, still to do (the lease was spent on 2026-12-02): `SHARDED_WARM_PEERS=buffered-only SHARDED_RUNS=6
# gpu_session.sh OUT sharded-warm=560`, then `SHARDED_COLD_GROUPS=cold-peers gpu_session.sh OUT sharded-cold=560`.
# `EXPERT_PATH_GROUPS=warm SESSION_SIZE=2GiB SESSION_CACHE_MIB=1000 SESSION_TURNS=12 SESSION_ROUNDS=3
#  gpu_session.sh OUT expert-path=230 session-ab=340`. The
# engine A/B's 10 fresh processes each import torch and transformers: on a fresh box (cold caches) 8 of
# them took 160 s on 2026-12-01, so 10 need ~200 s; 330 s leaves 1.6× for a slower box.
#
# session-pressure (issue 23 §4): boundary-release off vs on under one limit (the release-on session's
# anonymous peak + PRESSURE_HEADROOM_MIB, 32), 4 GiB GGUF, 128 experts, cache 2,000 MiB, reader pread, 4
# lanes, overlap, device compute, cold before every cell, PRESSURE_ROUNDS (6) cells a side interleaved
# ABBA. --pressure-method auto (PRESSURE_METHOD): a cgroup per cell where one can be made — under this
# process's own cgroup, else the nearest ancestor whose subtree_control holds memory: on the H200 the
# root /sys/fs/cgroup (issue 33 §4; its own /process_api/<id> refuses memory.max) —, else ONE balloon
# held over all 12 cells, inflated once before the first, leaving the limit + the machine's measured
# working set (Mapped + the worker's mapped file pages measured by the unlimited probe); each cell's
# worker locks its own resident file pages after turn 0 inside that room, and a cell whose own major
# faults still run above 4 a turn after turn 0 is `own-files` (it measured the method: the A/B fails that
# check); the bench holding a balloon is never the OOM killer's victim, each cell's worker is (its
# oom_score_adj +1000), and a cell it kills is recorded failed, oom-killed. PRESSURE_METHOD=cgroup refuses
# (one line in the report, no balloon) where no cgroup can be made. The step prints the report's Method
# line: which method ran, and where the cgroup was made. The first run (2026-12-03, balloon, before the
# lock) is docs/benchmarks/session-pressure-h200.md. The budget of its one call on a fresh box (540 s,
# machine start and the wheels' install not included):
#     model write (4 GiB; skipped when session-ab wrote it in this lease)   ≤  40 s
#     unlimited probe: 3 turns × 4 tokens, cold, one worker start           ≈  20 s
#     a cgroup per cell: nothing before the first (a balloon: mlock of
#     ~120 GB from 16 threads, once, ≤ 60 s)                                  0 s
#     12 cells × (worker start + CUDA ≈ 8 s, turn 0 cold ≈ 4 s, 7 turns × 4 tokens at 1.3–5.9 tok/s
#                 ≈ 5–22 s) = 12 × 17–34 s                                 ≈ 200–410 s
#     ledger export                                                         ≈   5 s
#     total                                                                 ≈ 225–475 s (a balloon: 285–535)
# A cell is cut at PRESSURE_CELL_TIMEOUT (45 s) and recorded failed with the turns it finished; should
# the step itself be cut, every finished cell is still in the ledger export. PRESSURE_SWAP_MIB=N (a
# second call) repeats it with an N MiB swap file on, recording swap growth per turn; the file is
# turned off and deleted when the bench ends however it ends (its guard), and the step checks.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu_session.sh OUT STEP [STEP ...]}
shift
declare -A LIMIT=([tests]=230 [experts-loads]=240 [experts-session]=220 [engine-ab]=330 [load-warm]=560
                  [load-cold]=440 [expert-path]=330 [expert-path-cold]=300 [session-ab]=540 [session-pressure]=540
                  [session-prefetch]=480 [session-miss]=540 [miss-breakdown]=60
                  [sharded-warm]=340 [sharded-cold]=300 [evidence]=330 [evidence-corpus]=180 [stress-lanes-ring]=240
                  [ranks-smoke]=300 [ranks-70b-write]=600 [ranks-scaling]=600)
steps=()
for s in "$@"; do  # STEP or STEP=SECONDS (a limit of its own for this call)
    name=${s%%=*}
    [[ $s == *=* ]] && LIMIT[$name]=${s#*=}
    steps+=("$name")
done
set -- "${steps[@]}"
total=0
for s in "$@"; do total=$(( total + ${LIMIT[$s]:-0} )); done
echo "steps: $* — ${total} s of limits in all"
if (( total > 1740 )); then  # 30 minutes of device time, less the machine's start
    echo "gpu_session.sh: ${total} s of limits is more than one lease holds (1,740 s): split the steps" >&2
fi
for s in "$@"; do  # an unknown step stops the script before it installs or runs anything
    [[ -v "LIMIT[$s]" ]] || { echo "gpu_session.sh: unknown step '$s' (${!LIMIT[*]})" >&2; exit 2; }
done
mkdir -p "$out" /tmp/bench
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
{ date -u; uname -a; nproc; free -g; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -V
  python3 -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|safetensors|cuda|fastsafe|runai|instant|gguf) '
} > "$out/machine.txt" 2>&1


step() {  # name, limit in seconds, command...
    local name=$1 limit=$2 t0
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    echo "$name: rc=$? after $(( $(date +%s) - t0 )) s (limit $limit s)"
}

for s in "$@"; do
    case $s in
    tests)
        WORKBENCH_TEST_DEVICE=cuda step gpu-tests "${LIMIT[tests]}" python3 -m pytest -q -p no:cacheprovider -o addopts= \
            tests/test_strategies_suite.py tests/test_upload_devices.py tests/test_upload_staging.py \
            tests/test_upload_adopt.py tests/test_strategies_hygiene.py tests/test_strategies_peers_gpu.py \
            tests/test_strategies_experts.py tests/test_strategies_experts_staged.py \
            tests/test_upload_write_combined.py tests/test_session_device.py tests/test_strategies_sets.py \
            tests/test_odirect_sets.py tests/test_strategies_peers_sets.py --junitxml="$out/gpu-tests.xml" ;;
    experts-loads)
        step experts-loads "${LIMIT[experts-loads]}" python3 benchmarks/bench/bench_experts.py --device cuda --dir /tmp/bench --size 2GiB \
            --experts 64 --runs 6 --parts ceilings,loads --ledger /tmp/bench/experts.sqlite --out "$out/experts-loads.md" ;;
    experts-session)
        step experts-session "${LIMIT[experts-session]}" python3 benchmarks/bench/bench_experts.py --device cuda --dir /tmp/bench --size 2GiB \
            --experts 64 --turns 20 --tokens 2 --cache-mib 128 --parts session --ledger /tmp/bench/experts.sqlite \
            --out "$out/experts-session.md"
        python3 -m workbench.cli ledger --ledger /tmp/bench/experts.sqlite export --csv "$out/experts" \
            --markdown "$out/experts/attempts.md" ;;
    engine-ab)
        step engine-ab "${LIMIT[engine-ab]}" python3 benchmarks/bench/bench_engine_ab.py --device cuda --dir /tmp/engine-ab --runs 5 \
            --out "$out/engine-ab.md" --export "$out/engine-ab" ;;
    load-warm)
        step load-warm "${LIMIT[load-warm]}" python3 benchmarks/bench/bench_load.py --device cuda --dir /tmp/bench --groups warm,threads \
            --budget-s 530 --out "$out/load-warm" ;;
    session-ab)  # issue 20: bounce vs in place as decode sessions, 4 lanes, overlap, the experts' matmuls on the GPU
        step session-ab "${LIMIT[session-ab]}" python3 benchmarks/bench/bench_session.py --device cuda --dir /tmp/bench \
            --size "${SESSION_SIZE:-4GiB}" --experts 128 --cache-mib "${SESSION_CACHE_MIB:-2000}" \
            --turns "${SESSION_TURNS:-20}" --tokens 4 --rounds "${SESSION_ROUNDS:-4}" --compute device \
            --parts ceilings,placement --ledger /tmp/bench/session.sqlite --out "$out/session-ab.md" ;;
    session-pressure)  # issue 23 §4: release off vs on under one limit, n = 6 a side (budget in the header)
        step session-pressure "${LIMIT[session-pressure]}" python3 benchmarks/bench/bench_session.py \
            --device "${SESSION_DEVICE:-cuda}" --dir /tmp/bench --size "${PRESSURE_SIZE:-4GiB}" \
            --experts "${PRESSURE_EXPERTS:-128}" --cache-mib "${PRESSURE_CACHE_MIB:-2000}" \
            --turns "${PRESSURE_TURNS:-8}" --tokens "${PRESSURE_TOKENS:-4}" --rounds "${PRESSURE_ROUNDS:-6}" \
            --compute "${PRESSURE_COMPUTE:-device}" --parts pressure --pressure-method "${PRESSURE_METHOD:-auto}" \
            --headroom-mib "${PRESSURE_HEADROOM_MIB:-32}" --swap-mib "${PRESSURE_SWAP_MIB:-0}" \
            --cell-timeout "${PRESSURE_CELL_TIMEOUT:-45}" --ledger /tmp/bench/session-pressure.sqlite \
            --out "$out/session-pressure.md"
        grep -m1 '^Method:' "$out/session-pressure.md" | cut -c1-400  # which method ran, and where
        python3 -c "from workbench.measure.session.swap import reap_stale; print('swap files left:', reap_stale('/tmp/bench'))" \
            > "$out/session-pressure-swaps.txt" 2>&1
        cat /proc/swaps >> "$out/session-pressure-swaps.txt"
        python3 -m workbench.cli ledger --ledger /tmp/bench/session-pressure.sqlite export --csv "$out/session-pressure" \
            --markdown "$out/session-pressure/attempts.md" > /dev/null ;;
    session-prefetch)  # issue 34 §3: prefetch none / previous / oracle 0.9 / route as a session A/B, n = 6 a side
        # (PREFETCH_ARMS='prefetch=none;prefetch=oracle:precision=0.9,recall=0.9' for two arms: ~150 s)
        # 24 cells × (worker start + CUDA ≈ 8 s, turn 0 filling the cache, 7 turns × 4 tokens ≈ 2–4 s) ≈ 290 s,
        # the 2 GiB model written once (≤ 20 s; reused by a later call in the same lease)
        step session-prefetch "${LIMIT[session-prefetch]}" python3 benchmarks/bench/bench_prefetch.py --device cuda \
            --dir /tmp/bench --size "${PREFETCH_SIZE:-2GiB}" --experts 64 --cache-mib "${PREFETCH_CACHE_MIB:-1000}" \
            --turns "${PREFETCH_TURNS:-8}" --tokens 4 --rounds "${PREFETCH_ROUNDS:-6}" --compute device \
            --cache "${PREFETCH_CACHE:-warm}" --distribution "${PREFETCH_DISTRIBUTION:-zipf}" \
            ${PREFETCH_ARMS:+--arms "$PREFETCH_ARMS"} --cell-timeout 60 --ledger /tmp/bench/prefetch.sqlite \
            --out "$out/session-prefetch.md"
        python3 -m workbench.cli ledger --ledger /tmp/bench/prefetch.sqlite export --csv "$out/session-prefetch" \
            --markdown "$out/session-prefetch/attempts.md" > /dev/null ;;
    session-miss)  # issue 34 §4-5: batched warm misses vs the ring, and --miss fetch/host/auto, n = 6 a side
        # (two calls fit best: MISS_GROUPS=batch ≈ 190 s, then MISS_GROUPS=miss ≈ 300 s). Fresh box: 2 GiB model write
        # ≤ 20 s (reused in a lease), ring 6 fresh processes ≈ 40 s, batch 12 cells × (worker + CUDA ≈ 8 s, 6 × 4 tokens
        # ≈ 3 s) ≈ 130 s; miss 18 cells of 4 × 2 tokens: the host arm's gguf-py dequantizes Q4_0 on one core
        # (35 MB/s on the loaded VM: ≈ 2-7 s a token of 254 MB) ≈ 6 × 25-60 s, the others 12 × 10 s. The rebuilt
        # batching against MADV_FREE refills (issue 34 §5): MISS_GROUPS=batch MISS_RING_RUNS=4 MISS_BATCH_ARMS='batch_misses=off;
        # batch_misses=on;batch_misses=on release_advice=free' session-miss=150 miss-breakdown=60 ≈ 4 rings × 3 s +
        # 18 cells × ~4 s (2026-12-04 17:00: 12 cells and 6 rings in 67 s) + the breakdown ≈ 15 s ≈ 100 s.
        # Next (2026-12-05, docs/benchmarks/miss-h200.md "Next"): batching alone, MADV_FREE alone and recycle
        # (the evicting miss takes the evicted pages: the VM's lever), MISS_GROUPS=batch MISS_RING_RUNS=3
        # MISS_BATCH_ARMS='batch_misses=off;batch_misses=on;release_advice=free;batch_misses=on release_advice=free;
        # release_advice=recycle;batch_misses=on release_advice=recycle' session-miss=260 miss-breakdown=90
        # ≈ 3 rings × 3 s + 36 cells × ~4.5 s (2026-12-04 19:01: 12 cells in 54 s) ≈ 175 s, the breakdown ≈ 30 s
        # The eager schedule (docs/benchmarks/miss-h200.md "The eager schedule", H100 2026-12-06 00:21: 145 s):
        # MISS_GROUPS=batch,miss MISS_RING_RUNS=6 MISS_BATCH_ARMS='batch_misses=off;placement=pool;placement=pool
        # schedule=eager' MISS_ARMS='placement=pool schedule=eager miss=fetch;placement=pool schedule=eager miss=auto'
        # MISS_TURNS=4 MISS_TOKENS=8 session-miss=540 ≈ 6 rings + 18 cells × ~3 s + 12 cells × ~5 s
        # Next (not run: the device time of 2026-12-06 ran out): the lanes' handoff under the eager pool,
        # MISS_GROUPS=batch MISS_RING_RUNS=3 MISS_ROUNDS=10 MISS_BATCH_ARMS='placement=pool schedule=eager;placement=pool
        # schedule=eager lane_handoff=lock' MISS_BREAKDOWN_ARMS='unbatched pool eager,unbatched pool eager lock'
        # MISS_BREAKDOWN_ROUNDS=2 session-miss=240 miss-breakdown=90 ≈ 3 rings + 20 cells × ~3.5 s + 4 sessions
        step session-miss "${LIMIT[session-miss]}" python3 benchmarks/bench/bench_miss.py --device cuda --dir /tmp/bench \
            --size "${MISS_SIZE:-2GiB}" --experts 64 --cache-mib "${MISS_CACHE_MIB:-1000}" --turns 6 --tokens 4 \
            --miss-turns "${MISS_TURNS:-4}" --miss-tokens "${MISS_TOKENS:-2}" ${MISS_ARMS:+--miss-arms "$MISS_ARMS"} --rounds "${MISS_ROUNDS:-6}" --groups "${MISS_GROUPS:-batch,miss}" --cell-timeout 60 \
            --ring-runs "${MISS_RING_RUNS:-6}" --batch-arms "${MISS_BATCH_ARMS:-batch_misses=off;batch_misses=on}" \
            --ledger /tmp/bench/miss.sqlite --out "$out/session-miss.md"
        python3 -m workbench.cli ledger --ledger /tmp/bench/miss.sqlite export --csv "$out/session-miss" \
            --markdown "$out/session-miss/attempts.md" > /dev/null ;;
    miss-breakdown)  # issue 34 §5: where a warm miss's time goes on cuda, unbatched / batched, each also with
        # MADV_FREE and with recycle (MISS_BREAKDOWN_ARMS: miss_breakdown.py --arms; 'batched free 2x' is 8 lanes), in
        # one process (no worker starts), MISS_BREAKDOWN_ROUNDS (1) sessions a path of 4 × 4 tokens; reuses session-miss's
        # 2 GiB model (else writes it, ≤ 20 s). ≈ 6 sessions × (warm 2 GiB ≈ 1 s, 4 × 4 tokens ≈ 1-2 s) + CUDA ≈ 15-25 s
        [[ -f /tmp/bench/bench-session-a64-e64-2048MiB.gguf ]] || python3 -c "import sys; sys.path.insert(0, 'benchmarks/bench')
from pathlib import Path; from bench_session import _model; _model(Path('/tmp/bench'), 2 << 30, 64, 64)"
        step miss-breakdown "${LIMIT[miss-breakdown]}" python3 benchmarks/bench/miss_breakdown.py --device cuda \
            --model /tmp/bench/bench-session-a64-e64-2048MiB.gguf --cache-mib "${MISS_CACHE_MIB:-1000}" --lanes 4 \
            --turns 4 --tokens 4 --rounds "${MISS_BREAKDOWN_ROUNDS:-1}" ${MISS_BREAKDOWN_ARMS:+--arms "$MISS_BREAKDOWN_ARMS"} \
            --out "$out/miss-breakdown.md"
        timeout 30 python3 benchmarks/bench/pread_refault.py --file /tmp/bench/bench-session-a64-e64-2048MiB.gguf --reps 24 --threads 1,4,8 \
            > "$out/pread-refault.txt" 2>&1  # a slice's pread into released / populated / lazily freed / moved-in /
            # resident pages, 1, 4, 8 threads ≈ 3 s (5 states × 8 threads × 24 slices of 884,736 B fit the file's first GiB)
        timeout 90 python3 benchmarks/bench/admit_cost.py --model /tmp/bench/bench-session-a64-e64-2048MiB.gguf \
            --cache-mib "${MISS_CACHE_MIB:-1000}" > "$out/admit-cost.txt" 2>&1 ;;  # an admission's µs by release
            # advice, one thread, a fresh process each (mremap against MADV_DONTNEED) ≈ 3 × 3-10 s
    load-cold)  # the budget must end well inside the limit: the script writes its tables after the last run
        step load-cold "${LIMIT[load-cold]}" python3 benchmarks/bench/bench_load.py --device cuda --dir /tmp/bench --groups cold \
            --budget-s 390 --out "$out/load-cold" ;;
    expert-path)  # issue 20 §5: experts vs ring warm on the 2 GiB A3B-like GGUF, staging variants, a small model
        step expert-path "${LIMIT[expert-path]}" python3 benchmarks/bench/bench_expert_path.py --device cuda --dir /tmp/bench --size 2GiB \
            --experts 64 --runs 6 --groups "${EXPERT_PATH_GROUPS:-warm,small}" --ledger /tmp/bench/expert-path.sqlite --out "$out/expert-path.md" ;;
    expert-path-cold)  # the same file cold, against this step's own disk walls
        step expert-path-cold "${LIMIT[expert-path-cold]}" python3 benchmarks/bench/bench_expert_path.py --device cuda --dir /tmp/bench --size 2GiB \
            --experts 64 --runs 6 --groups cold --ledger /tmp/bench/expert-path.sqlite --out "$out/expert-path-cold.md" ;;
    sharded-warm)  # issue 17 §6: the full Llama-3-8B-shaped bf16 checkpoint, 4 shards vs one file, ring and the peers
        step sharded-warm "${LIMIT[sharded-warm]}" python3 benchmarks/bench/bench_sharded.py --device cuda --dir /tmp/bench \
            --groups "${SHARDED_GROUPS:-warm-ring,warm-peers}" --runs "${SHARDED_RUNS:-5}" \
            --warm-peers "${SHARDED_WARM_PEERS:-buffered}" --out "$out/sharded-warm" ;;
    sharded-cold)  # the same files cold (peers at their defaults), against this step's own disk wall
        step sharded-cold "${LIMIT[sharded-cold]}" python3 benchmarks/bench/bench_sharded.py --device cuda --dir /tmp/bench \
            --groups "${SHARDED_COLD_GROUPS:-cold-ring,cold-peers}" --cold-runs "${SHARDED_RUNS:-5}" --cold-peers defaults \
            --wall-reps 2 --out "$out/sharded-cold" ;;
    evidence)  # issue 33 §1: transformers device_map="cuda", 5-shard 1.33 GB bf16 checkpoint it wrote, n runs warm and cold
        # (fresh box: checkpoint ≈ 30 s, 2 × 5 runs × ≈ 10–15 s (imports, CUDA context, load) ≈ 100–150 s, ≈ 180 s in all)
        step evidence "${LIMIT[evidence]}" python3 benchmarks/bench/bench_evidence.py --device cuda --dir /tmp/evidence \
            --runs "${EVIDENCE_RUNS:-5}" --out "$out/evidence.md" --json-dir "$out/evidence"
        grep -E '^(exit|\| [0-9])' "$out/evidence.md" | cut -c1-240 ;;
    evidence-corpus)  # issue 33 §1: the corpus table (13 real loaders, 11 fakes, cold and warm; transformers CPU here) ≈ 60–90 s
        step evidence-corpus "${LIMIT[evidence-corpus]}" python3 benchmarks/figures/evidence_corpus.py --out "$out/evidence-corpus.md"
        grep -E 'wrong|WRONG' "$out/evidence-corpus.md" ;;
    stress-lanes-ring)  # issue 35 §6: a failure injected at every point of lanes and ring loads on cuda (real fences
        # and async copies), 8 busy processes beside; fresh box ≈ 60–120 s (the CUDA context once, then ~0.2 s a load)
        step stress-lanes-ring "${LIMIT[stress-lanes-ring]}" python3 benchmarks/hardening/stress_lanes_ring.py --device cuda \
            --loads "${STRESS_LOADS:-300}" --busy 8 --hang-s 60 --json "$out/stress-lanes-ring.json"
        grep -E '^ "(loads|injected|finished|hangs|slowest_load_s|seconds)"' "$out/stress-lanes-ring.log"
        grep -A3 -E '"(other|left_threads)"' "$out/stress-lanes-ring.log" | head -8 ;;
    ranks-smoke)  # issue 36: 1, 2 and 4 ranks sharing the one H200 (gloo between them: NCCL refuses two ranks
        # on one device; each rank on the cuda backend), 1 GiB bf16 Llama-named set, warm, 5 strategies x 3 runs a
        # rank count, every rank's bytes read back; fresh box ~150-250 s (every rank imports torch, ~2 s)
        step ranks-smoke "${LIMIT[ranks-smoke]}" python3 benchmarks/bench/bench_ranks.py --device cuda:0 --dir /tmp/bench \
            --size 1GiB --ranks 1,2,4 --strategies "whole,ranges,ranges upload=pinned threads=4,shm,scatter" \
            --runs "${RANKS_RUNS:-3}" --out "$out/ranks-smoke.md"
        cat "$out/ranks-smoke.md" ;;
    ranks-70b-write)  # issue 36, a box of 8 H200s (nvidia-h200-x8): the Llama-3-70B-shaped bf16 set (143.8 GB,
        # 5 GB shards as the Hub ships it) written to /tmp/bench once (~1-2 GB/s: 75-150 s; a write cut by the
        # limit leaves only .partial files, so give it more rather than less), then one 2-rank run of ranges
        step ranks-70b-write "${LIMIT[ranks-70b-write]}" python3 benchmarks/bench/bench_ranks.py --device cuda --dir /tmp/bench \
            --shape llama3-70b --ranks 2 --strategies ranges --runs 1 --out "$out/ranks-70b-first.md" ;;
    ranks-scaling)  # issue 36, 8 H200s: warm, 2/4/8 ranks (one GPU each, NCCL), ranges, shm and scatter, 3 runs
        # each (70B bf16 does not fit one H200: no 1-rank point); ~20-60 s a point: RANKS_LIST=2,4 to split calls
        step ranks-scaling "${LIMIT[ranks-scaling]}" python3 benchmarks/bench/bench_ranks.py --device cuda --dir /tmp/bench \
            --shape llama3-70b --ranks "${RANKS_LIST:-8,4,2}" --strategies "${RANKS_STRATEGIES:-ranges upload=pinned threads=8,shm,scatter}" \
            --runs "${RANKS_RUNS:-3}" --out "$out/ranks-scaling.md"
        cat "$out/ranks-scaling.md" ;;
    *)
        echo "gpu_session.sh: unknown step '$s' (tests, experts-loads, engine-ab, load-warm, load-cold, experts-session," \
             "expert-path, expert-path-cold, session-ab, session-pressure, session-prefetch, sharded-warm, sharded-cold)" >&2
        exit 2 ;;
    esac
done
