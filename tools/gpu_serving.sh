#!/usr/bin/env bash
# Serving measurements of one build on the GPU machine, from the repository root (after
# `source tools/device_unpack.sh`), each step bounded so that a device call fits its time:
#   tests       asynchronous scheduling on CUDA: test_runtime RuntimeAsync.* (fixture goldens,
#               batch invariance) and test_backend_cuda CudaAsyncSteps.*
#   throughput  lancet bench throughput, Llama-3-8B shape, dummy weights, $NUM_PROMPTS requests
#               of 1000/1000 tokens: FP8 weights + FP8 KV (--max-num-seqs 1024) and BF16
#               (--max-num-seqs 384), each in the scheduling modes of $MODES
#   itl         bench/long_context/itl_under_prefill.sh with $ITL_FLAGS (16 streams during a
#               131,072-token prefill), and the same prompt's TTFT alone
#   d70b        lancet bench throughput, Llama-3-70B shape, FP8 weights + FP8 KV, $NUM_PROMPTS_70B
#               requests of 1000/1000
#   lc8b        bench/long_context/run.sh, Llama-3-8B shape, BF16 and FP8 weights + FP8 KV ($LC_LENGTHS)
#   lc70b       bench/long_context/run.sh, Llama-3-70B shape, FP8 weights + FP8 KV ($LC_LENGTHS)
# STEPS picks them (default "tests throughput"). Logs go to $OUT as one archive (a device call
# returns few files); the summary comes last.
#
# Environment: OUT (default ./gpu-out), BIN (default /tmp/x/new: lancet and tests/), STEPS,
# NUM_PROMPTS (1000), MODES ("async sync"), ITL_FLAGS ("--max-step-ms 90 --max-num-batched-tokens
# 8192 --log-level debug": the server log then times every step), NUM_PROMPTS_70B (300),
# LC_LENGTHS (8192 ... 131072), STEP_TIMEOUT (seconds per run, 280).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
BIN=${BIN:-/tmp/x/new}
STEPS=${STEPS:-tests throughput}
NUM_PROMPTS=${NUM_PROMPTS:-1000}
MODES=${MODES:-async sync}
ITL_FLAGS=${ITL_FLAGS:---max-step-ms 90 --max-num-batched-tokens 8192 --log-level debug}
NUM_PROMPTS_70B=${NUM_PROMPTS_70B:-300}
LC_LENGTHS=${LC_LENGTHS:-8192 16384 32768 65536 131072}
STEP_TIMEOUT=${STEP_TIMEOUT:-280}
mkdir -p "$OUT/logs"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
has() { [[ " $STEPS " == *" $1 "* ]]; }
note() { printf "%-34s %s\n" "$1" "$2" | tee -a "$SUMMARY"; }
# The fields of a bench --json result worth a line.
cat > /tmp/gpu_serving_fields.py <<'PY'
import json, sys
for line in reversed(open(sys.argv[1]).read().splitlines()):
    if line.startswith("{"):
        r = json.loads(line)
        e = r.get("engine", {})
        if "output_tokens_per_s" in r:
            print(f"{r['output_tokens_per_s']:.0f} output tok/s, {e.get('step_ms_mean', 0):.1f} ms/step, "
                  f"host share {100 * e.get('host_share', 0):.1f}% ({e.get('host_ms_per_step', 0):.2f} ms; output "
                  f"thread {e.get('output_ms_per_step', 0):.2f} ms), {r.get('preemptions', 0)} preemptions")
        else:
            print(f"TTFT {r.get('ttft_s_median', r.get('e2e_s_median', 0)):.3f} s")
        break
else:
    print("no result")
PY
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv > "$OUT/logs/machine.log" 2>&1

if has tests; then
  LANCET_ASYNC_TEST_BACKEND=cuda timeout 180 "$BIN/tests/test_runtime" --gtest_filter='RuntimeAsync.*' \
      > "$OUT/logs/runtime_async.log" 2>&1
  note "RuntimeAsync.* (cuda)" "rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/logs/runtime_async.log" | tr '\n' ' ')"
  timeout 120 "$BIN/tests/test_backend_cuda" --gtest_filter='CudaAsyncSteps.*' > "$OUT/logs/async_steps.log" 2>&1
  note "CudaAsyncSteps.*" "rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/logs/async_steps.log" | tr '\n' ' ')"
fi

M8=(--backend cuda --load-format dummy --model bench/configs/llama3-8b.json --json --max-model-len 4096)
throughput() {  # tag, flags...
  local tag=$1; shift
  timeout "$STEP_TIMEOUT" "$BIN/lancet" bench throughput "$@" > "$OUT/logs/tp_$tag.json" 2> "$OUT/logs/tp_$tag.log"
  note "throughput $tag" "rc=$? $(python3 /tmp/gpu_serving_fields.py "$OUT/logs/tp_$tag.json")"
}
if has throughput; then
  for mode in $MODES; do
    flag=--async-scheduling; [[ $mode == sync ]] && flag=--no-async-scheduling
    throughput "8b_fp8_$mode" "${M8[@]}" --num-prompts "$NUM_PROMPTS" --input-len 1000 --output-len 1000 \
        --quantization fp8 --kv-cache-dtype fp8 --max-num-seqs 1024 "$flag"
    throughput "8b_bf16_$mode" "${M8[@]}" --num-prompts "$NUM_PROMPTS" --input-len 1000 --output-len 1000 \
        --kv-cache-dtype bfloat16 --max-num-seqs 384 "$flag"
  done
fi

if has itl; then
  timeout "$STEP_TIMEOUT" "$BIN/lancet" bench latency --backend cuda --load-format dummy \
      --model bench/configs/llama3-8b.json --json --max-model-len 135168 --allow-long-max-model-len --batch-size 1 \
      --input-len 131072 --output-len 1 --num-iters 1 --max-num-batched-tokens 8192 \
      > "$OUT/logs/ttft_128k.json" 2> "$OUT/logs/ttft_128k.log"
  note "128K prompt alone" "rc=$? $(python3 /tmp/gpu_serving_fields.py "$OUT/logs/ttft_128k.json")"
  mkdir -p "$OUT/logs/itl"
  # shellcheck disable=SC2086
  BIN="$BIN/lancet" OUT="$OUT/logs/itl" timeout "$STEP_TIMEOUT" bench/long_context/itl_under_prefill.sh $ITL_FLAGS \
      > "$OUT/logs/itl/table.txt" 2> "$OUT/logs/itl/stderr.log"
  note "ITL under a 128K prefill" "rc=$? ($ITL_FLAGS)"
  cat "$OUT/logs/itl/table.txt" >> "$SUMMARY"
fi

if has d70b; then
  throughput "70b_fp8" --backend cuda --load-format dummy --model bench/configs/llama3-70b.json --json \
      --max-model-len 4096 --num-prompts "$NUM_PROMPTS_70B" --input-len 1000 --output-len 1000 --quantization fp8 \
      --kv-cache-dtype fp8
fi

long_context() {  # tag, flags...
  local tag=$1; shift
  mkdir -p "$OUT/logs/lc_$tag"
  LANCET="$BIN/lancet" timeout "$STEP_TIMEOUT" bench/long_context/run.sh --backend cuda --load-format dummy \
      --lengths "$LC_LENGTHS" --out "$OUT/logs/lc_$tag" "$@" > "$OUT/logs/lc_$tag/table.txt" 2> "$OUT/logs/lc_$tag/stderr.log"
  note "long context $tag" "rc=$?"
  cat "$OUT/logs/lc_$tag/table.txt" >> "$SUMMARY"
}
if has lc8b; then
  long_context 8b_bf16 --model bench/configs/llama3-8b.json --kv-cache-dtype bfloat16
  long_context 8b_fp8 --model bench/configs/llama3-8b.json --quantization fp8 --kv-cache-dtype fp8
fi
if has lc70b; then
  long_context 70b_fp8 --model bench/configs/llama3-70b.json --quantization fp8 --kv-cache-dtype fp8
fi

tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo
echo "==== gpu_serving ($OUT) ===="
cat "$SUMMARY"
