#!/usr/bin/env bash
# Sets up everything fullrecall and its tests need on a fresh machine:
# the redis-server binary and headless Chromium (Debian), a virtual environment with every extra,
# and the offline ONNX export of the default embedding model.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages, as root or through sudo.
apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v redis-server >/dev/null 2>&1 || apt_install redis-server
# Headless Chromium and its driver for the inspector's browser tests (tests/ui) and docs/inspector.png.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  apt_install chromium chromium-driver
fi

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# The CPU build of torch first, so sentence-transformers does not pull a CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all,test]"
# Export the default embedding model to ONNX once (fast, offline recall path).
python -m fullrecall.embeddings >/dev/null
