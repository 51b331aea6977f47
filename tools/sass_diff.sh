#!/usr/bin/env bash
# Whether a change altered the device code, without a GPU: compiles CUDA files at a base
# revision and in the working tree for sm_90a (nvcc -cubin, the build's flags), disassembles
# both with nvdisasm and compares each kernel's instruction sequence (opcodes; registers,
# addresses and the anonymous-namespace hash aside). Prints per kernel "same", or the
# instruction counts and the opcodes whose counts moved, and per file the kernels' register
# and spill figures from ptxas.
#   tools/sass_diff.sh BASE_REV [FILE.cu ...]     default: src/backend/cuda/attention/*.cu
# nvdisasm comes from $NVDISASM, PATH, or the pinned PyPI package nvidia-cuda-nvdisasm, which
# is installed into ~/.cache/lancet/nvdisasm on first use (the CUDA toolkit here has nvcc and
# ptxas but no disassembler).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:?usage: tools/sass_diff.sh BASE_REV [FILE.cu ...]}"
shift
files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  mapfile -t files < <(cd "$root" && ls src/backend/cuda/attention/*.cu)
fi
nvdisasm_version=13.5.37
nvd="${NVDISASM:-$(command -v nvdisasm || true)}"
if [[ -z $nvd ]]; then
  cache="$HOME/.cache/lancet/nvdisasm"
  nvd="$(find "$cache" -name nvdisasm -type f 2>/dev/null | head -1 || true)"
  if [[ -z $nvd ]]; then
    python3 -m pip install --quiet --no-deps --target "$cache" "nvidia-cuda-nvdisasm==$nvdisasm_version" >&2
    nvd="$(find "$cache" -name nvdisasm -type f | head -1)"
    chmod +x "$nvd"
  fi
fi
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
cuda_inc="$(dirname "$(dirname "$(readlink -f "$nvcc")")")/include"
work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --quiet --detach "$work/base" "$base"

compile() {  # compile TREE FILE OUT: a cubin and ptxas' resource lines
  "$nvcc" -DLANCET_CUDA_ARCHS=\"sm_90a\" -DLANCET_HAVE_CUDA=1 -I"$1/src" -isystem="$cuda_inc" -O3 -DNDEBUG \
    -arch=sm_90a -std=c++20 -x cu -cubin -Xptxas -v "$1/$2" -o "$3.cubin" 2> "$3.ptxas"
  "$nvd" -c "$3.cubin" > "$3.sass"
}

for f in "${files[@]}"; do
  name="$(basename "$f" .cu)"
  compile "$work/base" "$f" "$work/base_$name" &
  compile "$root" "$f" "$work/new_$name" &
  wait
  echo "== $f ($base -> working tree)"
  python3 - "$work/base_$name" "$work/new_$name" <<'EOF'
import collections, re, subprocess, sys

def readable(mangled):
    # Demangled, without the anonymous namespace (its name differs between the two trees).
    name = subprocess.run(['c++filt', mangled], capture_output=True, text=True).stdout.strip() or mangled
    return name.replace('(anonymous namespace)::', '')

def kernels(prefix):
    out, cur = collections.OrderedDict(), None
    for line in open(prefix + '.sass'):
        m = re.match(r'^\.text\.(\S+):', line)
        if m:
            cur = readable(m.group(1))
            out[cur] = []
            continue
        m = re.match(r'\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;', line)
        if cur is not None and m and m.group(1):
            ins = re.sub(r'^@!?U?P\w+\s+', '', m.group(1).strip('{} '))
            out[cur].append(ins.split()[0])
    return out

def resources(prefix):
    res, cur = {}, None
    for line in open(prefix + '.ptxas'):
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = readable(m.group(1))
        m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', line)
        if cur and m:
            res.setdefault(cur, {})['spills'] = int(m.group(1)) + int(m.group(2))
        m = re.search(r'Used (\d+) registers', line)
        if cur and m:
            res.setdefault(cur, {})['regs'] = int(m.group(1))
    return res

a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
ra, rb = resources(sys.argv[1]), resources(sys.argv[2])
same = 0
for k in sorted(set(a) | set(b)):
    short = re.sub(r'\([^()]*\)$', '', k).replace('void ', '').replace('lancet::cuda::', '')
    if k not in b or k not in a:
        print(f'  {"only in base" if k in a else "only in new"}: {short}')
        continue
    res = ''
    if ra.get(k) != rb.get(k):
        res = f'; registers/spills {ra.get(k)} -> {rb.get(k)}'
    if a[k] == b[k] and not res:
        same += 1
        continue
    ca, cb = collections.Counter(a[k]), collections.Counter(b[k])
    moved = sorted(((op, cb[op] - ca[op]) for op in set(ca) | set(cb) if ca[op] != cb[op]), key=lambda x: -abs(x[1]))
    what = 'same sequence' if a[k] == b[k] else f'{len(a[k])} -> {len(b[k])} instructions'
    print(f'  {short}: {what}{res}; ' + ', '.join(f'{op} {d:+d}' for op, d in moved[:14]))
print(f'  {same} of {len(set(a) & set(b))} kernels unchanged')
EOF
done
