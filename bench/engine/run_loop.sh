#!/usr/bin/env bash
# The AsyncEngine loop's host work per step with its readers (bench/engine/async_loop.cc):
# builds the benchmark in a build directory and prints one JSON line per batch size and reader
# layout. The tokenizer (detokenization is part of the output side) comes from MODEL.
#   bench/engine/run_loop.sh [BUILD_DIR=build] [MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf] [BATCHES=256,1024] [PROMPT=200] [DECODE=600] [READERS=threads,group,poll]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
batches="${3:-256,1024}"; prompt="${4:-200}"; decode="${5:-600}"; readers="${6:-threads,group,poll}"
cmake --build "$build" --target bench_async_loop >/dev/null
for b in ${batches//,/ }; do
  for r in ${readers//,/ }; do "$build/bench_async_loop" "$model" "$b" "$prompt" "$decode" "$r"; done
done
