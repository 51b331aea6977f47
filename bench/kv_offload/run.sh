#!/usr/bin/env bash
# The shared KV tier on the CPU: time to first token of an N-token prompt (default 2000) on the
# default model when it is computed, when it is computed and its blocks stored in Redis, and in
# a second process (another replica) that loads those blocks from Redis and computes only the
# last block. A redis-server is started on a unix socket in a temporary folder.
#   bench/kv_offload/run.sh [PROMPT_TOKENS] [REPEATS] [extra generate flags...]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2000}
REPEATS=${2:-3}
shift $(( $# > 2 ? 2 : $# )) || true
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
DIR=$(mktemp -d)
SOCK="$DIR/redis.sock"
redis-server --port 0 --unixsocket "$SOCK" --save "" --appendonly no --dir "$DIR" --logfile "$DIR/redis.log" &
RPID=$!
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 1 100); do redis-cli -s "$SOCK" ping >/dev/null 2>&1 && break; sleep 0.1; done

python3 - "$N" > "$DIR/text" <<'PY'
import sys
n = int(sys.argv[1])
print(" ".join(f"Crate {i} of the harbour shipment holds {(i * 37) % 101} brass valves and sits on shelf {i % 9}."
               for i in range(n // 8)))
PY
build/lancet tokenize --model "$MODEL" --json < "$DIR/text" |
  python3 -c "import json,sys; ids=json.load(sys.stdin)[:$N]; assert len(ids)==$N; print(','.join(map(str,ids)))" > "$DIR/ids"
IDS=$(cat "$DIR/ids")
LEN=$((N + 64))
gen() { build/lancet generate -m "$MODEL" --prompt-ids "$IDS" --max-tokens 8 --max-model-len "$LEN" --json "$@"; }
field() { python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print($1)"; }

printf "%-8s %-18s %-22s %-26s %-14s %s\n" run "computed (ms)" "computed+stored (ms)" "loaded from Redis (ms)" "blocks loaded" "same tokens"
for r in $(seq 1 "$REPEATS"); do
  redis-cli -s "$SOCK" flushall >/dev/null
  plain=$(gen "$@")
  stored=$(gen --kv-offload "unix://$SOCK" "$@")
  loaded=$(gen --kv-offload "unix://$SOCK" "$@")
  same=$([ "$(echo "$plain" | field 'j["ids"]')" = "$(echo "$loaded" | field 'j["ids"]')" ] && echo yes || echo NO)
  printf "%-8s %-18s %-22s %-26s %-14s %s\n" "$r" \
    "$(echo "$plain" | field 'round(1e3*j["timings"]["ttft_s"],1)')" \
    "$(echo "$stored" | field 'round(1e3*j["timings"]["ttft_s"],1)')" \
    "$(echo "$loaded" | field 'round(1e3*j["timings"]["ttft_s"],1)')" \
    "$(echo "$loaded" | field 'j["kv_offload"]["hit_blocks"]')" "$same"
done
echo "redis: $(redis-cli -s "$SOCK" dbsize) entries, $(redis-cli -s "$SOCK" info memory | grep -oE 'used_memory_human:[^[:space:]]+')"
