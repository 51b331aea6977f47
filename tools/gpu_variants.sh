#!/usr/bin/env bash
# Several builds of the CUDA kernels against each other in one call on the GPU machine, from the
# repository root (after `source tools/device_unpack.sh`): each build's CUDA tests on $FILTER and
# compute-sanitizer memcheck on $SAN_FILTER, then bench_ops rows of every build alternated
# $ROUNDS times, and a table of each case's rate per build and round. The builds are
# directories under $X holding bench_ops_cuda and tests/test_backend_cuda: `new` and the
# variants of tools/kernel_variants.sh packed beside it (tools/device_pack.sh new=build-gpu
# a=build-gpu/variants/a ...).
#   BUILDS="new a b" tools/gpu_variants.sh
# Environment: OUT (default ./gpu-out; logs go into $OUT/variants.tar.gz, the table to stdout and
# $OUT/variants_table.txt), X (default /tmp/x), BUILDS (default: every directory under $X with a
# bench_ops_cuda, new first), OP (bench_ops group, default attn), CASES (bench_ops filters
# separated by ';', default "q="), REPS (timed calls per prompt-attention case, default 3),
# ROUNDS (default 2), FILTER (default the prompt-attention tests), SAN_FILTER (default
# CudaAttention.SanitizerSized; empty skips memcheck), SKIP_TESTS=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
X=${X:-/tmp/x}
OP=${OP:-attn}
CASES=${CASES:-q=}
REPS=${REPS:-3}
ROUNDS=${ROUNDS:-2}
FILTER=${FILTER:-CudaAttention.TensorCorePrefill*:CudaAttention.PrefillAndChunks:CudaAttention.SanitizerSized}
SAN_FILTER=${SAN_FILTER-CudaAttention.SanitizerSized}
if [[ -z ${BUILDS:-} ]]; then
  BUILDS="new"
  for d in "$X"/*/; do
    b=$(basename "$d")
    [[ $b != new && -x $d/bench_ops_cuda ]] && BUILDS+=" $b"
  done
fi
logs=$(mktemp -d)
mkdir -p "$OUT"
summary=$OUT/variants_table.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$logs/machine.txt" 2>&1

if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  for b in $BUILDS; do
    timeout 300 "$X/$b/tests/test_backend_cuda" --gtest_filter="$FILTER" > "$logs/tests_$b.log" 2>&1
    note "tests $b: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$logs/tests_$b.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/tests_$b.log" | tee -a "$summary"
    if [[ -n $SAN_FILTER ]]; then
      timeout 180 compute-sanitizer --tool memcheck --error-exitcode 97 "$X/$b/tests/test_backend_cuda" \
          --gtest_filter="$SAN_FILTER" > "$logs/memcheck_$b.log" 2>&1
      note "memcheck $b: rc=$? $(grep 'ERROR SUMMARY' "$logs/memcheck_$b.log" | tail -1)"
    fi
  done
fi

IFS=';' read -r -a cases <<< "$CASES"
for r in $(seq 1 "$ROUNDS"); do
  for b in $BUILDS; do
    for c in "${cases[@]}"; do
      if [[ $OP == attn ]]; then
        timeout 300 "$X/$b/bench_ops_cuda" attn "$c" "$REPS" >> "$logs/bench_${b}_$r.log" 2>&1
      else
        timeout 300 "$X/$b/bench_ops_cuda" "$OP" "$c" >> "$logs/bench_${b}_$r.log" 2>&1
      fi
    done
  done
done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$logs/machine.txt" 2>&1

python3 - "$logs" "$BUILDS" "$ROUNDS" <<'PY' | tee -a "$summary"
import collections, json, sys
logs, builds, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
rate = collections.defaultdict(dict)  # case -> build -> [achieved per round]
unit = {}
for b in builds:
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{logs}/bench_{b}_{r}.log").read().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("JSON "):
                d = json.loads(line[5:])
                rate[d["case"]].setdefault(b, []).append(d["achieved"])
                unit[d["case"]] = d["unit"]
width = max([len(c) for c in rate] + [4])
print(f"{'case':<{width}}  unit     " + "".join(f"{b:>22}" for b in builds))
for c, per in rate.items():
    cells = ["/".join(f"{x:.1f}" for x in per.get(b, [])) or "-" for b in builds]
    print(f"{c:<{width}}  {unit[c]:<8} " + "".join(f"{x:>22}" for x in cells))
PY
tar -C "$logs" -czf "$OUT/variants.tar.gz" . && rm -rf "$logs"
