#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan (the libraries they link instrumented
# for coverage too, see fuzz/CMakeLists.txt) and runs each for a bounded time (default 30 s;
# argument 1 overrides), as many at once as there are cores. Seeds come from fuzz/corpus/<target>/
# (kept in the repository, written by tools/make_fuzz_corpus.py); what a run adds goes to
# build-sanitize/corpus/<target>/. Each target's last coverage line ("cov: N" edges) is printed.
# The build directory is the sanitizer tests' (tools/configure_sanitize_build.sh): only the
# targets and what they link are built, and what those tests built already is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
BUILD=$(tools/configure_sanitize_build.sh)
targets=$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')
cmake --build $BUILD -j "$(nproc)" --target $targets
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
  local t=$1 corpus=$BUILD/corpus/$1 seeds=()
  mkdir -p "$corpus"
  [[ -d fuzz/corpus/$t ]] && seeds=(fuzz/corpus/$t)
  # -timeout: an input that takes over 10 s is a hang, reported like a crash.
  $BUILD/fuzz/$t -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "$corpus" "${seeds[@]}" > $BUILD/$t.log 2>&1
  echo $? > $BUILD/$t.rc
}

for t in $targets; do
  while (( $(jobs -rp | wc -l) >= $(nproc) )); do sleep 0.5; done
  echo "fuzz: $t for ${SECONDS_EACH}s"
  rm -f $BUILD/$t.rc
  (set +e; run_one "$t") &
done
wait
failed=0 passed=0
for t in $targets; do
  if [[ "$(cat $BUILD/$t.rc 2>/dev/null)" == 0 ]]; then
    passed=$((passed + 1))
    echo "fuzz: $t ok, $(grep -ao 'cov: [0-9]* ft: [0-9]*' $BUILD/$t.log | tail -1)"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FAILED (see $BUILD/$t.log)"; tail -40 $BUILD/$t.log
  fi
done
if ((failed)); then
  echo "fuzz: $passed passed, $failed failed"
  exit 1
fi
echo "fuzz: all targets ran ${SECONDS_EACH}s without a crash, leak or timeout"
