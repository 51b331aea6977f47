#!/usr/bin/env bash
# Decode throughput with LoRA adapters vs the base model alone, on a dummy model shape:
# NUM adapters of rank RANK (random, bench/lora/make_dummy_adapters.py) spread over a batch of
# BATCH requests (INPUT prompt / OUTPUT generated tokens each), then the same batch on the base.
#   bench/lora/run.sh [extra lancet flags...]     (e.g. --backend cuda --load-format dummy)
# Environment: LANCET (binary; default build/lancet), CONFIG (bench/configs/llama3-8b.json),
# NUM (8), RANK (64), TARGETS (q_proj,k_proj,v_proj,o_proj), BATCH (64), INPUT (128),
# OUTPUT (512), OUT (a temp folder for the adapters and logs).
set -euo pipefail
cd "$(dirname "$0")/../.."
LANCET=${LANCET:-build/lancet}
CONFIG=${CONFIG:-bench/configs/llama3-8b.json}
NUM=${NUM:-8} RANK=${RANK:-64} TARGETS=${TARGETS:-q_proj,k_proj,v_proj,o_proj}
BATCH=${BATCH:-64} INPUT=${INPUT:-128} OUTPUT=${OUTPUT:-512}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
python3 bench/lora/make_dummy_adapters.py "$CONFIG" "$OUT/adapters" --num "$NUM" --rank "$RANK" --targets "$TARGETS" \
  > "$OUT/make_adapters.log"
modules=()
for ((i = 0; i < NUM; i++)); do modules+=("lora$i=$OUT/adapters/lora$i"); done
common=(--model "$CONFIG" --num-prompts "$BATCH" --max-num-seqs "$BATCH" --input-len "$INPUT" --output-len "$OUTPUT" --json "$@")
"$LANCET" bench throughput "${common[@]}" > "$OUT/base.json"
"$LANCET" bench throughput "${common[@]}" --max-loras "$NUM" --max-lora-rank "$RANK" --lora-modules "${modules[@]}" \
  --lora-requests > "$OUT/lora.json"
python3 - "$OUT/base.json" "$OUT/lora.json" <<'PY'
import json, sys
b, l = (json.load(open(p)) for p in sys.argv[1:3])
ratio = l["output_tokens_per_s"] / b["output_tokens_per_s"]
print(f"base {b['output_tokens_per_s']:.1f} tok/s, {l['lora_adapters']} adapters {l['output_tokens_per_s']:.1f} tok/s: "
      f"{ratio:.3f} of the base ({(1 - ratio) * 100:.1f}% cost)")
PY
