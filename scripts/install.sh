#!/usr/bin/env bash
# Install everything orpheus-svc needs on a fresh machine (Python 3.10+, Go 1.26+):
#   .venv with the server (editable), the Python client and the test tools, and the pinned
#   Go tools (buf, protoc plugins, grpcurl) in .tools/bin.
# torch comes from PyPI (a CUDA build that also runs on the CPU; about 3 GB the first time).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "${PYTHON}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ./clients/python -e '.[dev]'
scripts/install-tools.sh
echo "install: done. Serve the demo model with: .venv/bin/orpheus-svc serve"
