#!/usr/bin/env bash
# Install everything orpheus-svc needs on a fresh machine:
#   .venv with the server (editable), the Python client and the Python test tools (Python 3.10+;
#   the dev extra includes build and twine for the wheels: scripts/wheel-smoke.sh),
#   and, only when Go is on PATH, the pinned Go test tools (buf, protoc plugins, grpcurl,
#   ghz, kustomize) in .tools/bin via scripts/install-tools.sh.
# Serving needs Python alone: without Go the script says what it skipped and still succeeds.
# The tests (scripts/test.sh) need the Go tools: install Go and run scripts/install-tools.sh,
# or set ORPHEUS_REQUIRE_GO_TOOLS=1 to make their absence an error (CI).
# torch comes from PyPI (a CUDA build that also runs on the CPU; about 3 GB the first time).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  "${PYTHON}" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ./clients/python -e '.[server,dev]'
if command -v go >/dev/null 2>&1; then
  scripts/install-tools.sh
elif [[ "${ORPHEUS_REQUIRE_GO_TOOLS:-}" == 1 ]]; then
  echo "install: 'go' not found on PATH, and ORPHEUS_REQUIRE_GO_TOOLS=1 asks for the Go test tools" >&2
  exit 1
else
  echo "install: SKIPPED the Go test tools (buf, protoc-gen-go, protoc-gen-go-grpc, grpcurl, ghz, kustomize):"
  echo "  'go' is not on PATH. Serving and the Python client do not need them; scripts/test.sh does."
  echo "  To run the tests: install Go (1.24 or newer), then run scripts/install-tools.sh."
fi
echo "install: done. Serve the demo model with: .venv/bin/orpheus-svc serve"
