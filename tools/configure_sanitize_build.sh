#!/usr/bin/env bash
# Configures build-sanitize/: clang, ASan + UBSan, RelWithDebInfo, no CUDA, with the tests and
# the libFuzzer targets. tools/run_sanitized_tests.sh builds and runs the parser tests in it and
# tools/run_fuzz.sh the fuzz targets, so the libraries both link compile once (each lancet
# library a fuzz target links carries the fuzzer's coverage instrumentation, whose hooks the
# sanitizer runtime provides to the test binaries too). Prints the directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-sanitize
CC=clang CXX=clang++ cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLANCET_SANITIZE=ON -DLANCET_FUZZ=ON \
  -DLANCET_CUDA=OFF > /dev/null
echo $BUILD
