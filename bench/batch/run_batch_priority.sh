#!/usr/bin/env bash
# The Batch API's must-show on the CPU: `lancet serve` on the default model, 200 batch requests
# through /v1/batches beside an interactive client; prints interactive TTFT p50/p99 without and
# with the batch, their ratio and whether every result is present (bench/batch/batch_priority.py).
#   bench/batch/run_batch_priority.sh [NUM_BATCH] [NUM_INTERACTIVE] [extra serve flags...]
set -euo pipefail
cd "$(dirname "$0")/../.."
NUM_BATCH=${1:-200}
NUM_INTERACTIVE=${2:-40}
shift $(( $# > 2 ? 2 : $# )) || true
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=${PY:-.venv/bin/python}
DIR=$(mktemp -d)
LOG="$DIR/serve.log"
build/lancet serve "$MODEL" --port 0 --max-model-len 512 --kv-cache-memory 268435456 --threads 2 \
  --batch-dir "$DIR/batches" "$@" 2>"$LOG" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
PORT=""
for _ in $(seq 1 600); do
  PORT=$(grep -oE 'serving .* at http://[0-9.]+:[0-9]+' "$LOG" | grep -oE '[0-9]+$' || true)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { cat "$LOG"; exit 1; }
"$PY" bench/batch/batch_priority.py --base-url "http://127.0.0.1:$PORT" \
  --num-batch "$NUM_BATCH" --num-interactive "$NUM_INTERACTIVE" --min-overlap "$NUM_INTERACTIVE"
