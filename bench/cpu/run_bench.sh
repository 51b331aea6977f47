#!/usr/bin/env bash
# CPU benchmark of the Llama forward pass (not a test): builds bench_llama.cc against the
# static libraries of a build directory and reports prompt processing (pp) and generation (tg,
# after a 16-token prompt) tokens/s, best of 3, llama-bench style. When llama-cpp-python is
# installed in .venv-bench, llama.cpp runs on the same model in the same run, alternating with
# lancet so both see the same machine load.
#   bench/cpu/run_bench.sh [BUILD_DIR=build] [MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf] [PP=512] [TG=128] [THREADS=2] [ROUNDS=2]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
model="${2:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
pp="${3:-512}"; tg="${4:-128}"; threads="${5:-2}"; rounds="${6:-2}"
cmake --build "$build" --target lancet_runner lancet_io lancet_tokenizer >/dev/null
libs=()
for l in runner kv model backend backend_cpu io quant core; do libs+=("$build/src/liblancet_$l.a"); done
if grep -q "LANCET_HAVE_CUDA:BOOL=ON\|CMAKE_CUDA_COMPILER:" "$build/CMakeCache.txt" 2>/dev/null &&
   [[ -f "$build/src/liblancet_backend_cuda.a" ]]; then
  cmake --build "$build" --target lancet_backend_cuda >/dev/null
  cuda_lib="$(dirname "$(grep -m1 '^CMAKE_CUDA_COMPILER:' "$build/CMakeCache.txt" | cut -d= -f2)")/../lib64"
  libs+=("$build/src/liblancet_backend_cuda.a" "$build/src/liblancet_core.a" -L"$cuda_lib" -Wl,-rpath,"$cuda_lib" -lcudart -lcublasLt)
fi
out="$build/bench_llama_cpu"
g++ -O2 -std=c++20 -I"$root/src" "$root/bench/cpu/bench_llama.cc" "${libs[@]}" -lcrypto -lpthread -o "$out"
py="$root/.venv-bench/bin/python"
for ((r = 0; r < rounds; ++r)); do
  "$out" "$model" "$pp" "$tg" "$threads"
  if [[ -x "$py" ]]; then "$py" "$root/bench/cpu/llamacpp_bench.py" "$model" "$pp" "$tg" "$threads"; fi
done
