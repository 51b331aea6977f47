#!/usr/bin/env bash
# Packs binaries built here for a GPU machine that has the CUDA runtime but none of the Debian
# -dev packages: one archive (devrun/pack.tar.xz, under the 64 MiB a device call carries) with
#   NAME/...  the stripped binaries of each build named on the command line (lancet,
#             bench_ops_cuda and cublaslt_fp8_probe when built, and tests/test_* that exist; a
#             kernel variant of tools/kernel_variants.sh has no lancet),
#   lib/      the shared libraries they link that are neither part of the C runtime nor CUDA's,
#   shared/   ../shared/fixtures and ../shared/reference (the tests' reference data).
# On the device, from the repository root: `source tools/device_unpack.sh` unpacks it to /tmp/x,
# puts lib/ on LD_LIBRARY_PATH and links /work/shared to the fixtures (the tests' compiled-in
# path), so that /tmp/x/NAME/lancet and /tmp/x/NAME/tests/test_backend_cuda run there.
#
#   tools/device_pack.sh new=build-gpu [base=build-base ...] [v1=build-gpu/variants/v1 ...]
# Environment: TESTS (default "test_backend_cuda test_runtime test_engine"), SHARED (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { sed -n '2,14p' "$0"; exit 2; }
TESTS=${TESTS:-test_backend_cuda test_runtime test_engine}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/shared" devrun
bins=()
for spec in "$@"; do
  name=${spec%%=*} build=${spec#*=}
  [[ -x $build/lancet || -x $build/bench_ops_cuda ]] ||
    { echo "device_pack: no lancet or bench_ops_cuda in $build" >&2; exit 1; }
  mkdir -p "$stage/$name/tests"
  if [[ -x $build/lancet ]]; then
    cp "$build/lancet" "$stage/$name/"
    bins+=("$build/lancet")
  fi
  for tool in bench_ops_cuda cublaslt_fp8_probe; do
    [[ -x $build/$tool ]] && cp "$build/$tool" "$stage/$name/"
  done
  for t in $TESTS; do
    [[ -x $build/tests/$t ]] || continue
    cp "$build/tests/$t" "$stage/$name/tests/"
    bins+=("$build/tests/$t")
  done
  strip "$stage/$name"/* "$stage/$name"/tests/* 2>/dev/null || true
done
# What the device lacks: everything ldd resolves except the C/C++ runtime, zlib, OpenSSL, xz,
# zstd and expat (present there) and CUDA's own libraries (filtered by path: a name filter on
# "cuda" would also drop libicudata).
ldd "${bins[@]}" 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
  grep -v -E '^/usr/local/cuda' |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|libssl|libcrypto|liblzma|libzstd|libexpat)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
cp -r "$SHARED/fixtures" "$SHARED/reference" "$stage/shared/"
tar -C "$stage" -cf - . | xz -T0 -6 > devrun/pack.tar.xz
echo "device_pack: devrun/pack.tar.xz $(du -h devrun/pack.tar.xz | cut -f1) ($*; $(ls "$stage/lib" | wc -l) libraries)"
