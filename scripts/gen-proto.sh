#!/usr/bin/env bash
# Regenerate ALL committed stubs from proto/ (the API contract):
#
#   Go:     clients/go/gen/orpheus/tts/v1/{tts.pb.go,tts_grpc.pb.go}
#           via `buf generate` with the LOCAL pinned plugins in .tools/bin (buf.gen.yaml)
#           clients/go/gen/orpheus/admin/v1/{admin.pb.go,admin_grpc.pb.go} (the Go module
#           carries the admin stubs too: a package of its own, no client code around it)
#   Python: clients/python/src/orpheus_tts_client/proto/v1/{tts_pb2.py,tts_pb2.pyi,tts_pb2_grpc.py}
#           and a copy of proto/orpheus/tts/v1/*.proto (shipped in the client wheel)
#           (imports as orpheus_tts_client.proto.v1.tts_pb2; the proto package and the
#           descriptor's file name stay orpheus.tts.v1 / orpheus/tts/v1/tts.proto on the wire);
#           orpheus_svc/proto/admin/v1/{admin_pb2.py,admin_pb2.pyi,admin_pb2_grpc.py} and a
#           copy of proto/orpheus/admin/v1/*.proto: the admin API (orpheus.admin.v1) belongs to
#           the server, which serves it; the Python client does not carry it (operators call
#           it with grpcurl through reflection, docs/lora.md)
#           via `python -m grpc_tools.protoc` from a PINNED grpcio-tools (below) in its own
#           throwaway venv, so the stubs do not follow whatever grpcio-tools the dev venv has.
#
# Usage: scripts/gen-proto.sh [OUTPUT_ROOT]
#   OUTPUT_ROOT defaults to the repository root; scripts/check-generated.sh passes a temp copy.
# Env:   BUF (default: .tools/bin/buf; run scripts/install-tools.sh first).
#        PYTHON (default: python3) only creates the generator venv (.tools/py-gen-<version>);
#        grpcio-tools 1.63.2 has wheels for CPython 3.8 to 3.12 (a newer one builds from source).
#
# Why grpcio-tools 1.63.2: its protoc writes protobuf gencode 5.26.1 WITHOUT the
# `ValidateProtobufRuntimeVersion` call that later generators add (gencode 5.27.2+ calls it,
# and protobuf 5.x/6.x runtimes reject or warn about gencode of another major version), so the
# stubs import cleanly on every protobuf runtime from 5.26.1 to 7.x; the grpc plugin's
# GRPC_GENERATED_VERSION check only warns below grpcio 1.63.2. Pipecat pins protobuf<7,
# the server runs 7.x: one set of stubs serves both. The client's lower bounds in
# clients/python/pyproject.toml are these versions (scripts/check-generated.sh checks them),
# and scripts/test-client-compat.sh proves the range in fresh venvs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_ROOT="$(cd "${1:-${ROOT}}" && pwd)"
TOOLS="${ROOT}/.tools/bin"
BUF="${BUF:-${TOOLS}/buf}"
GRPC_TOOLS_VERSION="1.63.2"
GEN_VENV="${ROOT}/.tools/py-gen-${GRPC_TOOLS_VERSION}"
PYTHON="${PYTHON:-python3}"
for t in "${BUF}" "${TOOLS}/protoc-gen-go" "${TOOLS}/protoc-gen-go-grpc"; do
  [[ -x "${t}" ]] || { echo "gen-proto: ${t} missing; run scripts/install-tools.sh" >&2; exit 1; }
done
if ! "${GEN_VENV}/bin/python" -c "import grpc_tools.protoc" 2>/dev/null; then
  echo "gen-proto: creating the generator venv ${GEN_VENV} (grpcio-tools==${GRPC_TOOLS_VERSION})" >&2
  rm -rf "${GEN_VENV}"
  "${PYTHON}" -m venv "${GEN_VENV}"
  "${GEN_VENV}/bin/python" -m pip install --quiet --disable-pip-version-check \
    "grpcio-tools==${GRPC_TOOLS_VERSION}" "setuptools<81"
fi

cd "${ROOT}"

# Go: buf.gen.yaml writes to clients/go/gen relative to the output dir given by -o
# (clean: true removes stale files there first). Local plugins are found on PATH.
PATH="${TOOLS}:${PATH}" "${BUF}" generate --template buf.gen.yaml -o "${OUT_ROOT}"

# Python: protoc writes orpheus/<api>/v1/*_pb2*.py under a scratch dir (the proto path root
# is proto/, which keeps the descriptor's file name, e.g. orpheus/tts/v1/tts.proto); the files
# move to their Python package and the generated cross-file imports (and the module name the
# message classes report, which pickling imports) are rewritten to match: the top-level name
# `orpheus` belongs to an unrelated PyPI distribution.
#   orpheus.tts.*    -> orpheus_tts_client.proto.*   (the client distribution)
#   orpheus.admin.*  -> orpheus_svc.proto.admin.*    (the server distribution)
PY_PKG="${OUT_ROOT}/clients/python/src/orpheus_tts_client/proto"
ADMIN_PKG="${OUT_ROOT}/orpheus_svc/proto/admin"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT
mapfile -t PROTOS < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
(cd proto && "${GEN_VENV}/bin/python" -m grpc_tools.protoc -I. \
  --python_out="${SCRATCH}" --pyi_out="${SCRATCH}" --grpc_python_out="${SCRATCH}" "${PROTOS[@]}")

# place API DEST MODULE: the stubs of proto/orpheus/API/<version>/ into DEST/<version>/, with
# `orpheus.API.` rewritten to `MODULE.` (a Python module path ending in a dot-free name).
place() {
  local api="$1" dest="$2" module="$3" vdir v f
  for vdir in "${SCRATCH}"/orpheus/"${api}"/*/; do
    v="$(basename "${vdir}")"
    mkdir -p "${dest}/${v}"
    rm -f "${dest}/${v}"/*_pb2.py "${dest}/${v}"/*_pb2.pyi "${dest}/${v}"/*_pb2_grpc.py \
      "${dest}/${v}"/*.proto
    # The contract itself ships beside its stubs (package data of the wheel), so an
    # installed package can hand it to grpcurl -proto or another language's generator.
    cp proto/orpheus/"${api}"/"${v}"/*.proto "${dest}/${v}/"
    for f in "${vdir}"*_pb2.py "${vdir}"*_pb2.pyi "${vdir}"*_pb2_grpc.py; do
      [[ -e "${f}" ]] || continue
      sed -e "s/^from orpheus\.${api}\./from ${module}./" \
          -e "s/^import orpheus\.${api}\./import ${module}./" \
          -e "s/^\(_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, '\)orpheus\.${api}\./\1${module}./" \
          "${f}" >"${dest}/${v}/$(basename "${f}")"
    done
    # Package marker (kept if already present: it is hand-kept, not compared).
    [[ -f "${dest}/${v}/__init__.py" ]] \
      || echo '"""Generated protobuf/gRPC stubs for orpheus.'"${api}.${v}"' (see proto/; scripts/gen-proto.sh)."""' >"${dest}/${v}/__init__.py"
  done
  [[ -f "${dest}/__init__.py" ]] \
    || echo '"""Generated protobuf/gRPC stubs for the orpheus.'"${api}"' API (see proto/; scripts/gen-proto.sh)."""' >"${dest}/__init__.py"
}
place tts "${PY_PKG}" orpheus_tts_client.proto
place admin "${ADMIN_PKG}" orpheus_svc.proto.admin
[[ -f "${OUT_ROOT}/orpheus_svc/proto/__init__.py" ]] \
  || echo '"""Generated protobuf/gRPC stubs of the APIs the server owns (see proto/; scripts/gen-proto.sh)."""' >"${OUT_ROOT}/orpheus_svc/proto/__init__.py"

echo "gen-proto: Go -> ${OUT_ROOT}/clients/go/gen, Python -> ${PY_PKG}, ${ADMIN_PKG}"
