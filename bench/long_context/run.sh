#!/usr/bin/env bash
# Long-context table: for one model and backend, runs `lancet bench latency` at each context
# length (batch 1, 32 output tokens by default) and prints
#   context | weights | KV per sequence | weights + KV | TTFT | decode tok/s | max concurrent seqs
# where the last column is how many sequences of that length the KV cache holds at once (from
# its block count, as the engine allocates it).
#
#   bench/long_context/run.sh --model bench/configs/llama3-8b.json --backend cuda --load-format dummy
#   bench/long_context/run.sh --model bench/configs/llama3-70b.json --backend cuda --load-format dummy \
#       --quantization fp8 --kv-cache-dtype fp8
#   bench/long_context/run.sh --model models/SmolLM2-135M-Instruct.Q4_1.gguf --lengths "1024 2048 4096"
#
# Options read here: --lengths "L1 L2 ..." (default 8192 16384 32768 65536 131072), --output-len N
# (32), --num-iters N (1), --out DIR (results, default a temp dir), --lancet BIN (default:
# $LANCET, else build/lancet). Everything else goes to `lancet bench latency` unchanged.
# All lengths run in one `lancet bench latency` process (the model loads once) with
# --max-model-len the longest length + output and --allow-long-max-model-len, so lengths past
# the model's trained context run too; the table marks them. A length that fails (e.g. out of
# memory) is retried alone and listed with its error instead of stopping the run.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lengths="8192 16384 32768 65536 131072"
output_len=32
iters=1
out=""
lancet="${LANCET:-$root/build/lancet}"
model=""
pass=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lengths) lengths="${2//,/ }"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --num-iters) iters="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --lancet) lancet="$2"; shift 2 ;;
    --model|-m) model="$2"; pass+=("$1" "$2"); shift 2 ;;
    --max-model-len|--input-len|--batch-size|--json)
      echo "run.sh: $1 is set by the script" >&2; exit 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) pass+=("$1"); shift ;;
  esac
done
if [[ -z "$model" ]]; then
  echo "run.sh: --model is required" >&2
  exit 2
fi
if [[ ! -x "$lancet" ]]; then
  echo "run.sh: no lancet binary at $lancet (build it, or pass --lancet / set LANCET)" >&2
  exit 2
fi
[[ -n "$out" ]] || out="$(mktemp -d "${TMPDIR:-/tmp}/lancet-long-context.XXXXXX")"
mkdir -p "$out"
python="${PYTHON:-python3}"

status=0
# Every length in one process (the model loads once; a 70B dummy model takes minutes to make),
# max-model-len the longest length + output; the JSON lines are split into one file per length.
longest=0
for L in $lengths; do (( L > longest )) && longest=$L; done
echo "== contexts $lengths (max-model-len $((longest + output_len)))" >&2
"$lancet" bench latency "${pass[@]}" --input-len "${lengths// /,}" --output-len "$output_len" --batch-size 1 \
    --num-iters "$iters" --num-iters-warmup 0 --max-model-len "$((longest + output_len))" \
    --allow-long-max-model-len --json > "$out/all.jsonl" 2> "$out/all.log"
"$python" - "$out" "$out/all.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[2]):
    if line.startswith("{"):
        r = json.loads(line)
        with open("%s/%d.json" % (sys.argv[1], r["input_len"]), "w") as f:
            f.write(line)
EOF
# A length the shared run did not reach (it failed, e.g. out of memory) runs alone, so its error
# is kept in the results: the table prints it in place of the row.
for L in $lengths; do
  [[ -s "$out/$L.json" ]] && continue
  total=$((L + output_len))
  echo "== context $L alone (max-model-len $total)" >&2
  if "$lancet" bench latency "${pass[@]}" --input-len "$L" --output-len "$output_len" --batch-size 1 \
      --num-iters "$iters" --num-iters-warmup 0 --max-model-len "$total" --allow-long-max-model-len --json \
      > "$out/$L.json" 2> "$out/$L.log"; then
    :
  else
    status=1
    "$python" - "$L" "$out/$L.log" > "$out/$L.json" <<'EOF'
import json, sys
log = open(sys.argv[2], errors="replace").read().strip().splitlines()
print(json.dumps({"input_len": int(sys.argv[1]), "error": log[-1] if log else "failed"}))
EOF
  fi
done
files=()
for L in $lengths; do files+=("$out/$L.json"); done
"$python" "$here/table.py" --model "$model" "${files[@]}"
echo "(raw results in $out)" >&2
exit $status
