#!/usr/bin/env bash
# Runs the model-file and request parser tests again under ASan + UBSan (clang), so every corrupt
# input is shown to fail cleanly rather than by luck.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-asan
CC=clang CXX=clang++ cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLANCET_SANITIZE=ON \
  -DLANCET_CUDA=OFF > /dev/null
TARGETS=(test_core test_io test_quant)
cmake --build $BUILD -j "$(nproc)" --target lancet "${TARGETS[@]}"
cd $BUILD
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --output-on-failure -j "$(nproc)" -L "^(core|io|quant)$"
