#!/usr/bin/env bash
# CUDA op micro-benchmark (not a test): builds bench_ops.cc against the static libraries of a
# CUDA build directory and prints achieved GB/s or TFLOP/s next to the H200 ceilings.
#   bench/cuda/run_bench.sh [BUILD_DIR=build-cuda]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-cuda}"
cmake --build "$build" --target lancet_backend lancet_backend_cuda >/dev/null
cuda_home="${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}"
libs=()
for l in backend backend_cuda backend_cpu quant core; do libs+=("$build/src/liblancet_$l.a"); done
out="$build/bench_ops_cuda"
g++ -O2 -std=c++20 -DLANCET_HAVE_CUDA=1 -I"$root/src" -I"$cuda_home/include" "$root/bench/cuda/bench_ops.cc" \
  "${libs[@]}" "${libs[@]}" -L"$cuda_home/lib64" -L"$cuda_home/lib" -lcublasLt -lcudart -lcrypto -lpthread \
  -Wl,-rpath,"$cuda_home/lib64" -o "$out"
"$out"
