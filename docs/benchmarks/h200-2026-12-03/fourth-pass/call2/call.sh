#!/usr/bin/env bash
# Issue 25, fourth pass, call 2 (2026-12-03): one device call, steps in priority order, each under its own limit.
#   bash docs/benchmarks/h200-2026-12-03/fourth-pass/call2/call.sh OUT     (from the repository root)
# 1. every first-read slot carved from one mapping made at ring creation (`mapping=one`) against a mapping per
#    slot made by its reader inside the load (the default), 256 MiB / 1 GiB / 2 GiB dense and the MoE GGUF, n = 6;
# 2. probe_contention: the copy engine's rate while 0-16 readers pread the warm page cache;
# 3. 16 GB: ring against ring threads=12 / threads=10 / mapping=one (n = 6 interleaved);
# 4. the GPU test suite at this tree, in what is left.
set -uo pipefail
out=${1:?usage: call.sh OUT}
bash benchmarks/gpu_session.sh "$out/x" tests=1 > /dev/null 2>&1  # installs the wheels into /tmp/site
rm -rf "$out/x"
export PYTHONPATH=/tmp/site:$PWD
SIZES_STEPS="dense moe" DENSE_SIZES=256MiB,1GiB,2GiB DENSE_SPECS="ring|ring mapping=one" MOE_SPECS="ring|ring mapping=one" \
    bash benchmarks/gpu_sizes.sh "$out/s" 150 > /dev/null 2>&1
echo "sizes: at ${SECONDS} s"; grep -E "^\| |^### |^walls" "$out/s/summary.md"
counters() {  # the readers' counters of every row of a results.tgz or bench.json, in ms summed over readers
python3 - "$1" <<'PY'
import json, sys, tarfile
def rows(doc):
    for model in doc["models"]:
        for r in model["rows"]:
            print(model["file"][:34], r["spec"], {k: round(v / 1e3, 1) for k, v in r["counters"].items() if v})
p = sys.argv[1]
if p.endswith(".tgz"):
    with tarfile.open(p) as t:
        for m in t.getmembers():
            if m.name.endswith("bench.json"):
                rows(json.load(t.extractfile(m)))
else:
    rows(json.load(open(p)))
PY
}
counters "$out/s/results.tgz"
tar czf "$out/sizes.tgz" -C "$out" s && rm -rf "$out/s"
timeout 60 python3 benchmarks/probe_contention.py --device cuda --file /tmp/bench/bench-dense-bf16-2048MiB.safetensors \
    --out "$out/contention.json" > /dev/null 2>&1
echo "contention: rc=$? at ${SECONDS} s"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(k, v) for k, v in d.items() if k.startswith(('readers', 'engine'))]" "$out/contention.json"
export WORKBENCH_DATA=/tmp/wbd WORKBENCH_LEDGER=/tmp/wbd/sizes.sqlite WORKBENCH_LOCK_DIR=/tmp/wbl
mkdir -p /tmp/wbd /tmp/sizes
timeout 170 python3 benchmarks/bench_sizes.py --device cuda --dir /tmp/bench --sizes full --runs 6 \
    --spec "ring" --spec "ring threads=12" --spec "ring threads=10" --spec "ring mapping=one" --out /tmp/sizes/big > "$out/big.log" 2>&1
echo "big: rc=$? at ${SECONDS} s"; grep -E "^\| |^walls" /tmp/sizes/big/bench.md
counters /tmp/sizes/big/bench.json
cp "$out/big.log" /tmp/sizes/big/ 2>/dev/null; tar czf "$out/big.tgz" -C /tmp/sizes big; rm -f "$out/big.log"
left=$(( 570 - SECONDS ))
(( left > 60 )) && bash benchmarks/gpu_session.sh "$out/t" tests=$left > /dev/null 2>&1
echo "tests: at ${SECONDS} s"; tail -1 "$out/t/gpu-tests.log"; grep -E "^(FAILED|ERROR)" "$out/t/gpu-tests.log" | head
tar czf "$out/tests.tgz" -C "$out" t && rm -rf "$out/t"
