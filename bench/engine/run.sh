#!/usr/bin/env bash
# The engine's host work per decode step (bench/engine/host_overhead.cc): builds the benchmark
# in a build directory and prints one JSON line per batch size. The tokenizer
# (detokenization is part of the host work) comes from MODEL.
#   bench/engine/run.sh [BUILD_DIR=build] [MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf] [BATCHES=1,64,256] [PROMPT=1000] [DECODE=200] [sync|async]
# async: asynchronous scheduling (the CUDA default): step N+1 is launched before step N's tokens are taken.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
batches="${3:-1,64,256}"; prompt="${4:-1000}"; decode="${5:-200}"; mode="${6:-sync}"
cmake --build "$build" --target bench_host_overhead >/dev/null
"$build/bench_host_overhead" "$model" "$batches" "$prompt" "$decode" "$mode"
