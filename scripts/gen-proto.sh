#!/usr/bin/env bash
# Regenerate ALL committed stubs from proto/ (the API contract):
#
#   Go:     clients/go/gen/orpheus/tts/v1/{tts.pb.go,tts_grpc.pb.go}
#           via `buf generate` with the LOCAL pinned plugins in .tools/bin (buf.gen.yaml)
#   Python: clients/python/src/orpheus/tts/v1/{tts_pb2.py,tts_pb2.pyi,tts_pb2_grpc.py}
#           via `python -m grpc_tools.protoc` (imports as orpheus.tts.v1.tts_pb2)
#
# Usage: scripts/gen-proto.sh [OUTPUT_ROOT]
#   OUTPUT_ROOT defaults to the repository root; scripts/check-generated.sh passes a temp copy.
# Env:   PYTHON (default: .venv/bin/python, else python3) must have grpcio-tools installed.
#        BUF    (default: .tools/bin/buf; run scripts/install-tools.sh first).
#
# After bumping grpcio-tools, update the protobuf/grpcio lower bounds in
# clients/python/pyproject.toml to the "Protobuf Python Version" / GRPC_GENERATED_VERSION
# written into the generated files (check-generated.sh verifies they agree).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_ROOT="$(cd "${1:-${ROOT}}" && pwd)"
TOOLS="${ROOT}/.tools/bin"
BUF="${BUF:-${TOOLS}/buf}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${ROOT}/.venv/bin/python" ]]; then PYTHON="${ROOT}/.venv/bin/python"; else PYTHON="python3"; fi
fi

for t in "${BUF}" "${TOOLS}/protoc-gen-go" "${TOOLS}/protoc-gen-go-grpc"; do
  [[ -x "${t}" ]] || { echo "gen-proto: ${t} missing; run scripts/install-tools.sh" >&2; exit 1; }
done
"${PYTHON}" -c "import grpc_tools.protoc" 2>/dev/null \
  || { echo "gen-proto: ${PYTHON} lacks grpcio-tools (pip install grpcio-tools)" >&2; exit 1; }

cd "${ROOT}"

# Go: buf.gen.yaml writes to clients/go/gen relative to the output dir given by -o
# (clean: true removes stale files there first). Local plugins are found on PATH.
PATH="${TOOLS}:${PATH}" "${BUF}" generate --template buf.gen.yaml -o "${OUT_ROOT}"

# Python: the proto path root is proto/, so files land at orpheus/tts/v1/ under src/.
PY_OUT="${OUT_ROOT}/clients/python/src"
PY_PKG="${PY_OUT}/orpheus/tts/v1"
mkdir -p "${PY_PKG}"
rm -f "${PY_PKG}"/*_pb2.py "${PY_PKG}"/*_pb2.pyi "${PY_PKG}"/*_pb2_grpc.py
mapfile -t PROTOS < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
(cd proto && "${PYTHON}" -m grpc_tools.protoc -I. \
  --python_out="${PY_OUT}" --pyi_out="${PY_OUT}" --grpc_python_out="${PY_OUT}" "${PROTOS[@]}")
# Package markers so `orpheus.tts.v1` imports as regular packages (kept if already present).
for d in "${PY_OUT}/orpheus" "${PY_OUT}/orpheus/tts" "${PY_PKG}"; do
  [[ -f "${d}/__init__.py" ]] || echo '"""Generated protobuf/gRPC stubs for the orpheus.tts API (see proto/)."""' > "${d}/__init__.py"
done

echo "gen-proto: Go -> ${OUT_ROOT}/clients/go/gen, Python -> ${PY_PKG}"
