#!/usr/bin/env bash
# Timing on the GPU machine, next to peers measured in the same run (run after
# tools/gpu_check.sh's correctness steps, from the repository root):
#   1. bench_ops: the matmul/gemv and attention rows with their ceilings
#   2. peers: torch's cuBLAS BF16 GEMM, row-wise FP8 _scaled_mm, BF16 GEMV and SDPA at the same
#      shapes (peer_kernels.py from the project's shared reference folder, copied to $SHARED)
#   3. Llama-3-8B dummy weights, batch-1 decode: BF16, and FP8 weights + FP8 KV cache
# Logs to $OUT (default ./gpu-out); the table of step 3 comes last.
#
# Environment: OUT, BUILD (default build-gpu; holds lancet and bench_ops_cuda, prebuilt for
# sm_90a), SHARED (default ./devrun/shared), SKIP_PEERS=1, SKIP_DECODE=1, FP8_ONLY=1.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-build-gpu}
SHARED=${SHARED:-$ROOT/devrun/shared}
mkdir -p "$OUT"
log() { echo "[gpu_perf $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_perf.log"; }

log "bench_ops"
"$BUILD/bench_ops_cuda" > "$OUT/bench_ops.log" 2>&1 || log "bench_ops failed (rc=$?)"
grep -v '^JSON' "$OUT/bench_ops.log" > "$OUT/bench_ops_table.txt"

if [[ ${SKIP_PEERS:-0} != 1 && -f $SHARED/reference/peer_kernels.py ]]; then
  log "peer kernels (torch)"
  PYTHONUNBUFFERED=1 timeout 300 python3 "$SHARED/reference/peer_kernels.py" > "$OUT/peers.jsonl" 2> "$OUT/peers.err" ||
    log "peer kernels failed (rc=$?)"
fi

decode() {  # name, extra flags...
  local name=$1; shift
  log "decode $name"
  "$BUILD/lancet" bench latency --backend cuda --load-format dummy --model bench/configs/llama3-8b.json --json \
      --max-model-len 4096 --batch-size 1 --input-len 128 --output-len 256 --num-iters 2 "$@" \
      > "$OUT/decode_$name.json" 2> "$OUT/decode_$name.log" || log "decode $name failed (rc=$?)"
}
if [[ ${SKIP_DECODE:-0} != 1 ]]; then
  [[ ${FP8_ONLY:-0} == 1 ]] || decode bf16 --kv-cache-dtype bfloat16
  decode fp8 --quantization fp8 --kv-cache-dtype fp8
fi

echo
echo "==== gpu_perf ($OUT) ===="
cat "$OUT/bench_ops_table.txt"
if [[ -f $OUT/peers.jsonl ]]; then
  python3 - "$OUT/peers.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try: r = json.loads(line)
    except ValueError: continue
    what = r.get("shape", r.get("backend", ""))
    if "tflops" in r:
        print(f"peer {r['op']:<22} {what:<10} M={r.get('M', r.get('q', ''))!s:<6} {r['tflops']:8.1f} TFLOP/s")
    elif "GBps" in r: print(f"peer {r['op']:<22} {r['shape']:<10} {r['GBps']:8.1f} GB/s")
PY
fi
for f in "$OUT"/decode_*.json; do
  [[ -f $f ]] || continue
  python3 - "$f" <<'PY'
import json, sys
txt = open(sys.argv[1]).read().strip().splitlines()
for line in reversed(txt):
    if line.startswith("{"):
        r = json.loads(line)
        keys = ("decode_tok_per_s", "tpot_ms_median", "ttft_s_median", "roofline_tok_per_s", "pct_of_roofline")
        print(sys.argv[1].rsplit("/", 1)[-1], json.dumps({k: r[k] for k in keys if k in r}))
        break
else:
    print(sys.argv[1], "no result")
PY
done
