#!/usr/bin/env bash
# Inter-token latency of short chat streams while one long prompt is prefilled: starts
# `lancet serve`, waits for /health, runs
#   lancet bench serve --concurrency 16 --num-prompts 64 --input-len 256 --output-len 256 \
#       --background-input-len 131072 --json
# prints the short streams' ITL p50 / p99 (all gaps, and the gaps that overlap the long
# prompt's prefill) and the long prompt's TTFT as a small table, and stops the server.
#
#   bench/long_context/itl_under_prefill.sh                               # Llama 3 8B shape, dummy weights, CUDA
#   bench/long_context/itl_under_prefill.sh --max-num-batched-tokens 2048 --port 8001
#   BIN=build/lancet MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf BACKEND=cpu LENGTH=2048 \
#       INPUT_LEN=32 OUTPUT_LEN=16 NUM_PROMPTS=8 CONCURRENCY=4 \
#       bench/long_context/itl_under_prefill.sh --threads 2 --max-num-batched-tokens 256
#
# Arguments go to `lancet serve` unchanged (--port is also read here). Environment:
#   BIN (default build/lancet), MODEL (bench/configs/llama3-8b.json), BACKEND (cuda),
#   LOAD_FORMAT (dummy for a .json config, else auto), LENGTH (background prompt, 131072),
#   BACKGROUND_OUTPUT_LEN (1), MAX_MODEL_LEN (LENGTH + 4096 = 135168; passed with
#   --allow-long-max-model-len), CONCURRENCY (16), NUM_PROMPTS (64), INPUT_LEN (256),
#   OUTPUT_LEN (256), PORT (8000), HEALTH_TIMEOUT (seconds, 900), OUT (results folder: the
#   bench JSON and the server log; default a temp folder), PYTHON (python3).
# Exit status: that of `lancet bench serve` (1 if a request failed), 2 if the server did not
# come up.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${BIN:-$root/build/lancet}"
model="${MODEL:-$root/bench/configs/llama3-8b.json}"
backend="${BACKEND:-cuda}"
length="${LENGTH:-131072}"
bg_out="${BACKGROUND_OUTPUT_LEN:-1}"
max_model_len="${MAX_MODEL_LEN:-$((length + 4096))}"
concurrency="${CONCURRENCY:-16}"
num_prompts="${NUM_PROMPTS:-64}"
input_len="${INPUT_LEN:-256}"
output_len="${OUTPUT_LEN:-256}"
port="${PORT:-8000}"
health_timeout="${HEALTH_TIMEOUT:-900}"
python="${PYTHON:-python3}"
if [[ -n "${LOAD_FORMAT:-}" ]]; then load_format="$LOAD_FORMAT"
elif [[ "$model" == *.json ]]; then load_format=dummy
else load_format=auto
fi

serve_args=()
port_given=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    --port) port="$2"; port_given=1; serve_args+=("$1" "$2"); shift 2 ;;
    --port=*) port="${1#--port=}"; port_given=1; serve_args+=("$1"); shift ;;
    *) serve_args+=("$1"); shift ;;
  esac
done
[[ $port_given == 1 ]] || serve_args+=(--port "$port")

if [[ ! -x "$bin" ]]; then
  echo "itl_under_prefill.sh: no lancet binary at $bin (build it, or set BIN)" >&2
  exit 2
fi
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/lancet-itl-under-prefill.XXXXXX")}"
mkdir -p "$out"
url="http://127.0.0.1:$port"

"$bin" serve --model "$model" --backend "$backend" --load-format "$load_format" \
  --max-model-len "$max_model_len" --allow-long-max-model-len "${serve_args[@]}" > "$out/serve.log" 2>&1 &
server_pid=$!
# The server started here is stopped on every way out: SIGTERM drains, SIGKILL if it hangs.
stop_server() {
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 1 600); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid" 2>/dev/null
  fi
  wait "$server_pid" 2>/dev/null
}
trap stop_server EXIT
trap 'exit 130' INT TERM

echo "== starting lancet serve ($model, $backend, max-model-len $max_model_len) on port $port; log $out/serve.log" >&2
healthy=0
for _ in $(seq 1 $((health_timeout * 2))); do
  if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
  # Our own server, not another one already on the port: its log names the port it bound.
  if grep -q "listening on http://[^ ]*:$port," "$out/serve.log" && curl -sf "$url/health" > /dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 0.5
done
if [[ $healthy != 1 ]]; then
  echo "itl_under_prefill.sh: the server did not become healthy; last lines of its log:" >&2
  tail -n 20 "$out/serve.log" >&2
  exit 2
fi

echo "== bench serve: $num_prompts x ($input_len in, $output_len out) at concurrency $concurrency," \
  "background prompt of $length tokens" >&2
"$bin" bench serve --url "$url" --concurrency "$concurrency" --num-prompts "$num_prompts" \
  --input-len "$input_len" --output-len "$output_len" --background-input-len "$length" \
  --background-output-len "$bg_out" --json > "$out/bench.json" 2> "$out/bench.log"
status=$?
cat "$out/bench.log" >&2

"$python" - "$out/bench.json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip()
if not text:
    sys.exit("no benchmark output (see bench.log)")
r = json.loads(text)
b = r.get("background", {})
w = b.get("short_itl_during_prefill", {})
print(f"short streams: {r['completed']} of {r['num_prompts']} completed ({r['input_len']} in, "
      f"{r['output_len']} out, concurrency {r['concurrency']}); background prompt: "
      f"{b.get('prompt_tokens', 0)} tokens, {'completed' if b.get('completed') else 'FAILED ' + b.get('error', '')}")
rows = [
    ("short ITL, all gaps", f"{r['median_itl_ms']:.2f}", f"{r['p99_itl_ms']:.2f}", ""),
    (f"short ITL, during prefill ({w.get('count', 0)} gaps)", f"{w.get('median_ms', 0):.2f}",
     f"{w.get('p99_ms', 0):.2f}", ""),
    ("short TTFT", f"{r['median_ttft_ms']:.2f}", f"{r['p99_ttft_ms']:.2f}", ""),
    ("background TTFT", "", "", f"{b.get('ttft_ms', 0) / 1000:.3f}"),
]
width = max(len(r[0]) for r in rows)
print(f"| {'metric':<{width}} | p50 ms   | p99 ms   | s        |")
print(f"|{'-' * (width + 2)}|----------|----------|----------|")
for name, p50, p99, s in rows:
    print(f"| {name:<{width}} | {p50:>8} | {p99:>8} | {s:>8} |")
EOF
echo "(bench JSON and server log in $out)" >&2
exit $status
