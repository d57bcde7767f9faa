#!/usr/bin/env bash
# Issue 28's table from one device call, on prebuilt binaries: key_store_bench (16 x 64K and
# 1 x 1M positions), paged_logits_bench, topk_bench, the PyTorch eager baselines, the
# conformance run (scripts/conformance.sh with DSAF_CONFORMANCE_PREBUILT=1), the CPU job
# (the reference's key path + scores + top-512 against PyTorch's, one core, three rounds
# alternating), then one bundle of the inputs and bench/make_table.py's table.
#   bench/table_run.sh BUILD_DIR RUN [OUT_DIR]
# BUILD_DIR holds dsa-fidelity, the benchmarks, reference_bench and every conformance
# adapter (built for sm_90a, here or on another machine); RUN names the files
# (run<RUN>-*.json, run<RUN>-table-inputs.json, run<RUN>-table.md); OUT_DIR defaults to
# $OUT/table. The host's libraries come from the Debian packages in .deps/debs
# (scripts/gpu_host.sh --fetch), unpacked once into $DSAF_DEPS_PREFIX (/tmp/dsaf-deps).
# The conformance run's capture reads one upstream file under $DSAF_UPSTREAM_ROOT/src
# (default .deps/upstream; scripts/conformance.sh). $PARTS: "gpu", "cpu" or both (the
# default); the bundle and the table are made from whatever OUT_DIR holds.
# (scripts/gpu_check.sh's bench part builds on the host and times one shape, without the
# conformance run and the CPU job; the Debian packages are unpacked as scripts/gpu_host.sh
# does, without its GoogleTest build, which nothing here needs.)
set -uo pipefail
B=$(cd "$1" && pwd) run=$2
O=${3:-${OUT:-/tmp/out}/table}; mkdir -p "$O"
O=$(cd "$O" && pwd)
cd "$(dirname "$0")/.."
repo=$PWD
t0=$(date +%s)
say() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - t0 )) s] $*" | tee -a "$O/progress.log"; }
prefix=${DSAF_DEPS_PREFIX:-/tmp/dsaf-deps}
if [ ! -f $prefix/.unpacked ] && [ -d .deps/debs ]; then mkdir -p $prefix; for f in .deps/debs/*.deb; do dpkg -x "$f" $prefix; done; touch $prefix/.unpacked; fi
lib=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$lib:$lib/hdf5/serial:${LD_LIBRARY_PATH:-}"
export PATH=/usr/local/cuda/bin:$PATH
say "start $(git rev-parse --short HEAD 2>/dev/null) gpu $(nvidia-smi --query-gpu=name --format=csv,noheader)"
if [[ " ${PARTS:-gpu cpu} " == *" gpu "* ]]; then
timeout 120 $B/bench/key_store_bench "$O/run$run-key-store-16x64k.json" > "$O/ksb.log" 2>&1; say "ksb exit $?"
DSAF_BENCH_SEQ_LEN=1048576 timeout 120 $B/bench/key_store_bench "$O/run$run-key-store-1x1m.json" > "$O/ksb1.log" 2>&1; say "ksb1 exit $?"
timeout 120 $B/bench/paged_logits_bench "$O/run$run-paged-logits.json" > "$O/pl.log" 2>&1; say "paged logits exit $?"
timeout 60 $B/bench/topk_bench "$O/run$run-topk.json" > "$O/topk.log" 2>&1; say "topk_bench exit $?"
(cd bench && timeout 60 python3 torch_key_path.py > "$O/run$run-torch-key-path.json" 2> "$O/torch-key.log"); say "torch_key_path exit $?"
(cd bench && timeout 60 python3 torch_paged_logits.py > "$O/run$run-torch-paged-logits.json" 2> "$O/torch-pl.log"); say "torch_paged_logits exit $?"
(cd bench && timeout 60 python3 torch_topk.py > "$O/run$run-torch-topk.json" 2> "$O/torch-topk.log"); say "torch_topk exit $?"
say "conformance"
DSAF_CONFORMANCE_PREBUILT=1 DSAF_UPSTREAM_ROOT=${DSAF_UPSTREAM_ROOT:-$repo/.deps/upstream} timeout 200 scripts/conformance.sh $B "$O/conformance" > "$O/conformance.log" 2>&1; say "conformance exit $?"
fi
if [[ " ${PARTS:-gpu cpu} " == *" cpu "* ]]; then
say "CPU job, one core, alternating"
for i in 1 2 3; do
  taskset -c 3 $B/bench/reference_bench --benchmark_filter='BM_KeyPathScoresTop512/1/real_time' --benchmark_format=json > "$O/cpu-ref-$i.json" 2> "$O/cpu-ref-$i.log"
  (cd bench && taskset -c 3 python3 torch_key_path.py --cpu 1 > "$O/cpu-torch-$i.json" 2>> "$O/cpu-torch.log")
  say "cpu round $i done"
done
python3 - "$O" "$run" <<'PY'
import json, sys
o, run = sys.argv[1], sys.argv[2]
rounds, torch = [], ""
for i in (1, 2, 3):
    ref = json.load(open(f"{o}/cpu-ref-{i}.json"))
    b = [x for x in ref["benchmarks"] if x["name"].startswith("BM_KeyPathScoresTop512/1")][0]
    assert b["time_unit"] == "ms", b["time_unit"]
    t = json.load(open(f"{o}/cpu-torch-{i}.json"))
    torch = t["torch"]
    rounds.append({"reference": round(b["real_time"], 1), "torch": round(t["median_ms"], 1)})
json.dump({"job": "dsv32-ref key path + fp32 scores + top-512, 32768 keys, 64 heads, one core",
           "alternating_medians_ms": rounds, "torch": torch}, open(f"{o}/run{run}-cpu-job.json", "w"))
PY
say "cpu job exit $?"
fi
python3 - "$O" "$run" <<'PY'
import json, os, sys
o, run = sys.argv[1], sys.argv[2]
def load(n):
    p = os.path.join(o, n)
    return json.load(open(p)) if os.path.exists(p) else None
inputs = {}
def put(opt, n):
    d = load(n)
    if d is not None: inputs.setdefault(opt, {})[n] = d
put("--key-store", f"run{run}-key-store-16x64k.json"); put("--key-store", f"run{run}-key-store-1x1m.json")
put("--paged-logits", f"run{run}-paged-logits.json"); put("--topk", f"run{run}-topk.json")
put("--cpu", f"run{run}-cpu-job.json"); put("--torch-key-path", f"run{run}-torch-key-path.json")
put("--torch-paged-logits", f"run{run}-torch-paged-logits.json"); put("--torch-topk", f"run{run}-torch-topk.json")
conf = {}
cdir = os.path.join(o, "conformance")
if os.path.isdir(cdir):
    for n in sorted(os.listdir(cdir)):
        p = os.path.join(cdir, n)
        if n.endswith(".json"):
            try: conf[n] = json.load(open(p))
            except Exception: conf[n] = open(p).read()
        elif n.endswith((".txt", ".csv", ".md")):
            conf[n] = open(p).read()
if conf: inputs["--peers"] = {f"run{run}-conformance.json": conf}
json.dump({"make_table_inputs": inputs}, open(os.path.join(o, f"run{run}-table-inputs.json"), "w"))
PY
python3 bench/make_table.py --inputs "$O/run$run-table-inputs.json" -o "$O/run$run-table.md" > "$O/make_table.log" 2>&1; say "make_table exit $?"
say done
