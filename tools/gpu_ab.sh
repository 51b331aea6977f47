#!/usr/bin/env bash
# A/B of two builds on the GPU machine, in one call, from the repository root: the build under
# test (NEW) and a reference build (BASE, e.g. the previous commit), each holding lancet,
# tests/test_backend_cuda and bench_ops_cuda prebuilt for sm_90a.
#   tests    NEW's CUDA op tests, then compute-sanitizer memcheck on $SAN_FILTER
#   tokens   FP8 checkpoints of the fixtures (lancet quantize --fp8): greedy ids of NEW with
#            graphs, NEW eager and BASE with graphs (graph == eager is the gate; NEW vs BASE is
#            reported, since a changed kernel may round differently)
#   ops      bench_ops matmul [$OPS_FILTER] of both builds, alternated
#   attn     bench_ops attn [$ATTN_FILTER] of both builds, alternated $ROUNDS times (one line per
#            case and build in the summary: TFLOP/s or GB/s of every round)
#   decode   batch-1 decode of the Llama-3-8B shape (dummy weights), BF16 and FP8 weights + FP8
#            KV, the two builds alternated $ROUNDS times
#   d70b     the same for the 70B shape, FP8 weights + FP8 KV, once per build
# STEPS (default "tests tokens ops decode") picks the steps. Logs to $OUT; a table comes last.
#
# Environment: OUT, NEW (default build-gpu), BASE (default build-base), SHARED (default
# ./devrun/shared, the fixtures), ROUNDS (default 2), OPS_FILTER, ATTN_FILTER, SAN_FILTER, TEST_TIMEOUT and
# SAN_TIMEOUT (seconds; default 300 and 180).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
NEW=${NEW:-build-gpu}
BASE=${BASE:-build-base}
SHARED=${SHARED:-$PWD/devrun/shared}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-tests tokens ops decode}
SAN_FILTER=${SAN_FILTER:-CudaFp8Fused.*:CudaOps.*:CudaGraph.*}
mkdir -p "$OUT"
SUMMARY=$OUT/ab_summary.txt
: > "$SUMMARY"
log() { echo "[gpu_ab $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_ab.log"; }
note() { printf "%-40s %s\n" "$1" "$2" | tee -a "$SUMMARY"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/machine.log" 2>&1

if has tests; then
  log "op tests ($NEW)"
  timeout "${TEST_TIMEOUT:-300}" "$NEW/tests/test_backend_cuda" > "$OUT/op_tests.log" 2>&1
  note "op tests" "rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/op_tests.log" | tr '\n' ' ')"
  grep -B3 -A8 -E 'Failure|FAILED  \] [A-Za-z]' "$OUT/op_tests.log" | head -60 >> "$SUMMARY"
  log "memcheck $SAN_FILTER"
  timeout "${SAN_TIMEOUT:-180}" compute-sanitizer --tool memcheck --error-exitcode 97 "$NEW/tests/test_backend_cuda" --gtest_filter="$SAN_FILTER" \
      > "$OUT/memcheck.log" 2>&1
  note "memcheck" "rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

ids_of() {  # the ids of a generate --json log
  python3 -c 'import json,sys
for l in reversed(open(sys.argv[1]).read().splitlines()):
    if l.startswith("{"): print(",".join(map(str, json.loads(l)["ids"]))); break' "$1" 2>/dev/null
}
if has tokens; then
  ids=$(seq -s, 3 42)
  for d in "$SHARED"/fixtures/*/; do
    [[ -f $d/config.json ]] || continue
    name=$(basename "$d")
    ck=/tmp/fp8_$name
    "$NEW/lancet" quantize --fp8 "$d" "$ck" > "$OUT/quantize_$name.log" 2>&1 || { note "fp8 $name" "quantize failed"; continue; }
    for run in new_graph new_eager base_graph; do
      bin=$NEW/lancet; [[ $run == base_* ]] && bin=$BASE/lancet
      extra=(); [[ $run == *eager ]] && extra=(--enforce-eager)
      "$bin" generate --backend cuda "${extra[@]}" --model "$ck" --prompt-ids "$ids" --max-tokens 32 --ignore-eos \
          --json > "$OUT/gen_${name}_$run.log" 2>&1
    done
    a=$(ids_of "$OUT/gen_${name}_new_graph.log"); b=$(ids_of "$OUT/gen_${name}_new_eager.log")
    c=$(ids_of "$OUT/gen_${name}_base_graph.log")
    g="FAIL"; [[ -n $a && $a == "$b" ]] && g="PASS"
    s="differ"; [[ -n $a && $a == "$c" ]] && s="equal"
    note "fp8 $name graph==eager" "$g (ids vs base build: $s)"
  done
fi

if has ops; then
  for r in 1 2; do
    for b in "$NEW" "$BASE"; do
      log "bench_ops matmul $b (round $r)"
      "$b/bench_ops_cuda" matmul ${OPS_FILTER:-} 2>&1 | grep -v '^JSON' > "$OUT/ops_$(basename "$b")_$r.txt"
    done
  done
fi

if has attn; then
  for r in $(seq 1 "$ROUNDS"); do
    for b in "$NEW" "$BASE"; do
      log "bench_ops attn $b (round $r)"
      "$b/bench_ops_cuda" attn ${ATTN_FILTER:-} > "$OUT/attn_$(basename "$b")_$r.txt" 2>&1
    done
  done
  # One summary line per case and build: the achieved figure of each round.
  python3 - "$OUT" "$NEW" "$BASE" "$ROUNDS" >> "$SUMMARY" <<'PY'
import json, os, sys
out, builds, rounds = sys.argv[1], sys.argv[2:4], int(sys.argv[4])
rows = {}
for b in builds:
    tag = os.path.basename(b)
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"attn_{tag}_{r}.txt")
        if not os.path.exists(path):
            continue
        for line in open(path):
            if line.startswith("JSON "):
                j = json.loads(line[5:])
                rows.setdefault((j["case"], j["unit"]), {}).setdefault(tag, []).append(j["achieved"])
for (case, unit), per in rows.items():
    for tag, vals in per.items():
        print(f"attn {case:42s} {tag:12s} " + " / ".join(f"{v:.1f}" for v in vals) + f" {unit}")
PY
fi

# The decode rate and TPOT of a bench latency --json output.
cat > /tmp/gpu_ab_rate.py <<'PY'
import json, sys
for line in reversed(open(sys.argv[1]).read().splitlines()):
    if line.startswith("{"):
        r = json.loads(line)
        print(f"{r['decode_tok_per_s']:.1f} tok/s, TPOT {r.get('tpot_ms_median', 0):.3f} ms")
        break
else:
    print("no result")
PY
decode() {  # build, name, model, output length, iterations, extra flags...
  local b=$1 name=$2 model=$3 olen=$4 iters=$5; shift 5
  local tag; tag=$(basename "$b")
  log "decode $name ($b)" >&2
  "$b/lancet" bench latency --backend cuda --load-format dummy --model "$model" --json --max-model-len 4096 \
      --batch-size 1 --input-len 128 --output-len "$olen" --num-iters "$iters" "$@" > "$OUT/dec_${name}_$tag.json" \
      2> "$OUT/dec_${name}_$tag.log"
  python3 /tmp/gpu_ab_rate.py "$OUT/dec_${name}_$tag.json"
}
if has decode; then
  for r in $(seq 1 "$ROUNDS"); do
    for b in "$NEW" "$BASE"; do
      note "8b bf16 $(basename "$b") r$r" "$(decode "$b" bf16 bench/configs/llama3-8b.json 256 2 --kv-cache-dtype bfloat16)"
      note "8b fp8+fp8kv $(basename "$b") r$r" "$(decode "$b" fp8 bench/configs/llama3-8b.json 256 2 --quantization fp8 --kv-cache-dtype fp8)"
    done
  done
fi
if has d70b; then
  for b in "$NEW" "$BASE"; do
    note "70b fp8+fp8kv $(basename "$b")" "$(decode "$b" fp8_70b bench/configs/llama3-70b.json 64 1 --quantization fp8 --kv-cache-dtype fp8)"
  done
fi

# At most a few files come back from a call: the logs go in one archive.
(cd "$OUT" && tar -czf logs.tar.gz --exclude=logs.tar.gz --exclude=ab_summary.txt . &&
  find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name ab_summary.txt ! -name 'ops_*_1.txt' -delete)
echo
echo "==== gpu_ab ($OUT) ===="
for f in "$OUT"/ops_*_1.txt; do
  [[ -f $f ]] || continue
  echo "-- $(basename "$f")"; cat "$f"
done
cat "$SUMMARY"
