#!/usr/bin/env bash
# Installs what lancet needs to build and test: Debian packages (when missing) and the Python
# test tools in .venv (pinned in tools/requirements-test.txt). Idempotent: a second run only
# checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config nlohmann-json3-dev libcpp-httplib-dev libboost-dev libcli11-dev libyaml-cpp-dev
      libpcre2-dev libpoppler-cpp-dev libicu-dev libssl-dev libgtest-dev libbenchmark-dev clang libclang-rt-dev
      python3-venv chromium haproxy prometheus libhiredis-dev libxxhash-dev redis-server)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "deps: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements-test.sha256
want=$(sha256sum tools/requirements-test.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  echo "deps: installing Python test tools"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tools/requirements-test.txt
  echo "$want" > "$stamp"
fi
echo "deps: ok"
