#!/usr/bin/env bash
# Variants of CUDA kernels for one A/B call on a GPU machine, without a build per variant: for
# each NAME=PATCH (a `git diff` of files under src/backend/cuda, applied to HEAD), compiles only
# the CUDA files the patch changes or that include a changed header (the build's own nvcc
# command lines, from compile_commands.json, pointed at a patched copy of the tree), swaps those
# objects into a copy of the build's liblancet_backend_cuda.a and links bench_ops_cuda and
# tests/test_backend_cuda against it:
#   BUILD/variants/NAME/bench_ops_cuda, BUILD/variants/NAME/tests/test_backend_cuda
# A minute or two per variant instead of a full CUDA build; the rest of each binary is the
# build's, so two variants differ in the patched kernels only. Pack them with
# `tools/device_pack.sh new=BUILD a=BUILD/variants/a ...` and alternate their bench_ops rows in
# one call.
#   tools/kernel_variants.sh [-b BUILD] NAME=PATCH [NAME=PATCH ...]
# BUILD (default build-gpu) is a CUDA build of HEAD with bench_ops_cuda and test_backend_cuda
# built; a variant's ptxas report is BUILD/variants/NAME/ptxas.log.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-gpu"
if [[ ${1:-} == -b ]]; then
  build="$(cd "$2" && pwd)"
  shift 2
fi
[[ $# -ge 1 ]] || { sed -n '2,16p' "$0"; exit 2; }
lib="$build/src/liblancet_backend_cuda.a"
for f in "$lib" "$build/compile_commands.json" "$build/CMakeFiles/bench_ops_cuda.dir/bench/cuda/bench_ops.cc.o" \
         "$build/tests/CMakeFiles/test_backend_cuda.dir/link.txt"; do
  [[ -f $f ]] || {
    echo "kernel_variants: $build lacks $f (cmake --build $build --target bench_ops_cuda test_backend_cuda)" >&2
    exit 1
  }
done
work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

for spec in "$@"; do
  name=${spec%%=*} patch="$(readlink -f "${spec#*=}")"
  [[ $name =~ ^[A-Za-z0-9_.-]+$ && -f $patch ]] || { echo "kernel_variants: bad variant '$spec'" >&2; exit 1; }
  out="$build/variants/$name"
  rm -rf "$out" && mkdir -p "$out/tests" "$out/obj"
  git -C "$root" worktree remove --force "$work/tree" >/dev/null 2>&1 || true
  git -C "$root" worktree add --quiet --detach "$work/tree" HEAD
  git -C "$work/tree" apply "$patch"
  mapfile -t changed < <(git -C "$work/tree" diff --name-only HEAD)
  for f in "${changed[@]}"; do
    [[ $f == src/backend/cuda/* ]] ||
      { echo "kernel_variants: $name changes $f (only src/backend/cuda is swapped)" >&2; exit 1; }
  done
  # The objects to rebuild: every CUDA source of the library that is, or depends on, a changed
  # file (the build's .o.d dependency lists name each header a source includes).
  mapfile -t cmds < <(python3 - "$build" "$root" "$work/tree" "$out/obj" "${changed[@]}" <<'PY'
import json, os, re, shlex, sys
build, root, tree, objdir, changed = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
wanted = {os.path.join(root, f) for f in changed}
for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
    src, cmd, cwd = entry["file"], entry["command"], entry["directory"]
    if not src.endswith(".cu") or "lancet_backend_cuda.dir" not in cmd:
        continue
    args = shlex.split(cmd)
    obj = args[args.index("-o") + 1]
    dep = os.path.join(cwd, obj + ".d")
    deps = set(re.split(r"\s+", open(dep).read().replace("\\\n", " "))) if os.path.exists(dep) else set()
    if src not in wanted and not (deps & wanted):
        continue
    expanded, i = [], 0
    while i < len(args):  # inline response files (CMake passes the include paths in one)
        if args[i] == "--options-file":
            expanded += shlex.split(open(os.path.join(cwd, args[i + 1])).read())
            i += 2
        else:
            expanded.append(args[i])
            i += 1
    keep, skip = [], False
    for a in expanded:  # drop the dependency-file flags, point the tree's paths at the copy
        if skip:
            skip = False
            continue
        if a in ("-MD",):
            continue
        if a in ("-MT", "-MF"):
            skip = True
            continue
        keep.append(a.replace(root + "/src", tree + "/src"))
    out = os.path.join(objdir, os.path.basename(obj))
    keep[keep.index("-o") + 1] = out
    if not any(tree + "/src" in a for a in keep):
        sys.exit(f"kernel_variants: the command for {src} names no include path under {root}/src")
    print(cwd + "\t" + os.path.basename(obj) + "\t" + shlex.join(keep + ["-Xptxas", "-v"]))
PY
)
  [[ ${#cmds[@]} -gt 0 ]] || { echo "kernel_variants: $name changes no CUDA object" >&2; exit 1; }
  cp "$lib" "$out/liblancet_backend_cuda.a"
  members="$(ar t "$lib")"
  for line in "${cmds[@]}"; do
    IFS=$'\t' read -r cwd member cmd <<< "$line"
    [[ $(grep -cx "$member" <<< "$members") == 1 ]] ||
      { echo "kernel_variants: archive member $member is not unique" >&2; exit 1; }
    echo "kernel_variants: $name: $member"
    (cd "$cwd" && eval "$cmd") 2>> "$out/ptxas.log"
    (cd "$out/obj" && ar r "$out/liblancet_backend_cuda.a" "$member")
  done
  # The build's own link lines, with the variant's library.
  swap="s#[^ ]*/liblancet_backend_cuda\.a#$out/liblancet_backend_cuda.a#g"
  (cd "$build" && eval "$(sed "$swap; s#-o bench_ops_cuda#-o $out/bench_ops_cuda#" \
    CMakeFiles/bench_ops_cuda.dir/link.txt)")
  (cd "$build/tests" && eval "$(sed "$swap; s#-o test_backend_cuda#-o $out/tests/test_backend_cuda#" \
    CMakeFiles/test_backend_cuda.dir/link.txt)")
  rm -rf "$out/obj" "$out/liblancet_backend_cuda.a"
  echo "kernel_variants: $out ($(grep -c 'spill stores' "$out/ptxas.log" || true) kernels compiled;" \
       "$(grep -E '[1-9][0-9]* bytes spill stores' "$out/ptxas.log" | wc -l) with spills)"
done
