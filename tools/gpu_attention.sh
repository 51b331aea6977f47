#!/usr/bin/env bash
# Attention on the GPU machine in one run, from the repository root: the CUDA attention tests
# (every kernel against the CPU reference), then bench_ops' attention rows next to torch SDPA
# (cuDNN and FlashAttention-2 backends, tools/attention_peers.py) on the same shapes, with the
# ratio lancet / cuDNN. Logs under $OUT (default ./gpu-out); the table comes last.
# Environment: OUT, BUILD (default build-gpu, holding tests/test_backend_cuda and bench_ops_cuda
# built for sm_90a), SKIP_TESTS=1, SKIP_PEERS=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
rc=0
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  "$BUILD/tests/test_backend_cuda" --gtest_filter='CudaAttention.*:CudaKvWrite.*' > "$OUT/attention_tests.log" 2>&1 || rc=1
  echo "attention tests: $([[ $rc == 0 ]] && echo PASS || echo FAIL) ($(grep -c '^\[       OK' "$OUT/attention_tests.log") ok)"
fi
"$BUILD/bench_ops_cuda" attn > "$OUT/bench_attention.log" 2>&1 || rc=1
if [[ ${SKIP_PEERS:-0} != 1 ]]; then
  PYTHONUNBUFFERED=1 timeout 400 python3 tools/attention_peers.py > "$OUT/peers_attention.jsonl" 2> "$OUT/peers_attention.err" || rc=1
fi
python3 tools/attention_table.py "$OUT/bench_attention.log" "$OUT/peers_attention.jsonl"
exit $rc
