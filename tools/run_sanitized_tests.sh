#!/usr/bin/env bash
# Runs the tests of the untrusted-input parsers again under ASan + UBSan (clang): model files
# (core, io, quant suites: every corrupt-file case) and the chat-template sandbox, so every
# bad input is shown to fail cleanly rather than by luck. The build directory is the fuzz
# targets' (tools/configure_sanitize_build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(tools/configure_sanitize_build.sh)
TARGETS=(test_core test_io test_quant test_tokenizer)
cmake --build $BUILD -j "$(nproc)" --target "${TARGETS[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
$BUILD/tests/test_tokenizer --gtest_filter='ChatTemplateSandbox*:ChatTemplateApi*' --gtest_brief=1
cd $BUILD
ctest --output-on-failure -j "$(nproc)" -L "^(core|io|quant)$"
