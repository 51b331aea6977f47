#!/usr/bin/env bash
# Nsight Compute on one kernel of bench_ops, on the GPU machine, from the repository root: for
# each case, one launch of the kernel under the speed-of-light, occupancy, launch, scheduler,
# warp-state and source-counter sections (where its warps stall and on which instructions),
# saved as a report and printed as text. Build with -lineinfo (CMAKE_CUDA_FLAGS) to see the
# CUDA source lines next to the SASS.
#   OUT=... BUILD=/tmp/x/new tools/gpu_ncu.sh
# Environment: OUT (default ./gpu-out), BUILD (default build-gpu; holds bench_ops_cuda),
# OP (bench_ops group, default attn), KERNEL (regex, default attention_prefill_sm90),
# CASES (bench_ops case filters separated by ';'; a filter ending in '$' matches the end of a
# label; default the 32K x 32K and 4K x 4K BF16 rows),
# SKIP (launches of the kernel to skip first, default 3: past the warm-up).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu}
OP=${OP:-attn}
KERNEL=${KERNEL:-attention_prefill_sm90}
CASES=${CASES:-b=1 ctx=32768 q=32768\$;b=1 ctx=4096 q=4096\$}
SKIP=${SKIP:-3}
mkdir -p "$OUT"
log() { echo "[gpu_ncu $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_ncu.log"; }
command -v ncu > /dev/null || { log "ncu not found"; exit 1; }
i=0
IFS=';' read -r -a cases <<< "$CASES"
for c in "${cases[@]}"; do
  i=$((i + 1))
  log "case $i: $OP \"$c\" (kernel $KERNEL)"
  timeout 300 ncu --clock-control none --kernel-name "regex:$KERNEL" --launch-skip "$SKIP" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section WarpStateStats --section SourceCounters --export "$OUT/ncu_case$i" --force-overwrite \
      "$BUILD/bench_ops_cuda" "$OP" "$c" 1 > "$OUT/ncu_case$i.run.log" 2>&1 || log "ncu case $i rc=$?"
  [[ -f $OUT/ncu_case$i.ncu-rep ]] || continue
  ncu --import "$OUT/ncu_case$i.ncu-rep" --page details > "$OUT/ncu_case$i.txt" 2>&1
  # Every SASS instruction with its stall samples (csv), for the lines that hold the most.
  ncu --import "$OUT/ncu_case$i.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_case$i.sass.csv" 2>&1 ||
    log "source page of case $i not printed"
  log "case $i: $(grep -E 'Duration|Compute \(SM\) Throughput|No Eligible|Issued Warp' "$OUT/ncu_case$i.txt" | tr -s ' ' | tr '\n' ';')"
done
