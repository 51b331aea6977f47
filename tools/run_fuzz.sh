#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan and runs each for a bounded time
# (default 30 s; argument 1 overrides). Seeds come from fuzz/corpus/<target>/ when present.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
BUILD=build-fuzz
CC=clang CXX=clang++ cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLANCET_FUZZ=ON \
  -DLANCET_SANITIZE=ON -DLANCET_CUDA=OFF -DLANCET_TESTS=OFF > /dev/null
targets=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
cmake --build $BUILD -j "$(nproc)" --target $targets
failed=0
for t in $targets; do
  corpus=$BUILD/corpus/$t
  mkdir -p "$corpus"
  seeds=()
  [[ -d fuzz/corpus/$t ]] && seeds=(fuzz/corpus/$t)
  echo "fuzz: $t for ${SECONDS_EACH}s"
  if ! $BUILD/fuzz/$t -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=2048 \
       -print_final_stats=0 "$corpus" "${seeds[@]}" > $BUILD/$t.log 2>&1; then
    echo "fuzz: $t FAILED (see $BUILD/$t.log)"; tail -40 $BUILD/$t.log; failed=1
  fi
done
if ((failed)); then
  echo "fuzz: 0 passed, 1 failed"
  exit 1
fi
echo "fuzz: all targets ran ${SECONDS_EACH}s without a crash"
