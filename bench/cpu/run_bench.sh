#!/usr/bin/env bash
# CPU benchmark of the Llama forward pass (not a test): builds bench_llama.cc against the
# static libraries of a build directory and reports prompt processing (pp) and generation (tg)
# tokens/s, best of 3, llama-bench style.
#   bench/cpu/run_bench.sh [BUILD_DIR=build] [MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf] [PP=512] [TG=128] [THREADS=2]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
pp="${3:-512}"; tg="${4:-128}"; threads="${5:-2}"
cmake --build "$build" --target lancet_model lancet_io lancet_tokenizer >/dev/null
libs=()
for l in model backend backend_cpu io quant core; do libs+=("$build/src/liblancet_$l.a"); done
out="$build/bench_llama_cpu"
g++ -O2 -std=c++20 -I"$root/src" "$root/bench/cpu/bench_llama.cc" "${libs[@]}" -lcrypto -lpthread -o "$out"
"$out" "$model" "$pp" "$tg" "$threads"
