#!/usr/bin/env bash
# CUDA op micro-benchmark (not a test): builds bench_ops_cuda (bench_ops.cc against the static
# libraries) in a CUDA build directory and runs it; it prints achieved GB/s or TFLOP/s next to
# the H200 ceilings.
#   bench/cuda/run_bench.sh [BUILD_DIR=build-cuda] [matmul [FILTER] | attn [FILTER [REPS]] | prompt | lora]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-cuda}"
shift || true
cmake --build "$build" --target bench_ops_cuda >/dev/null
"$build/bench_ops_cuda" "$@"
