#!/usr/bin/env bash
# CI gate for the API contract and its committed stubs:
#   1. `buf lint` (STANDARD, buf.yaml)
#   2. optional `buf breaking` when BUF_BREAKING_AGAINST is set, e.g.
#        BUF_BREAKING_AGAINST='.git#branch=main,subdir=proto' scripts/check-generated.sh
#   3. regenerate Go + Python stubs into a temp dir (scripts/gen-proto.sh) and fail if the
#      committed ones (clients/go/gen, clients/python/src/orpheus_tts_client/proto/v1/*_pb2*
#      and the *.proto copies shipped in the client wheel; the admin API's
#      orpheus_svc/proto/admin/v1/*_pb2* and its .proto copy in the server wheel) differ
#   4. the client's protobuf/grpcio lower bounds match the generated code's versions
# Needs the tools from scripts/install-tools.sh; gen-proto.sh makes its pinned grpcio-tools venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUF="${BUF:-${ROOT}/.tools/bin/buf}"
cd "${ROOT}"
[[ -x "${BUF}" ]] || { echo "check-generated: ${BUF} missing; run scripts/install-tools.sh" >&2; exit 1; }

echo "check-generated: buf lint"
"${BUF}" lint

if [[ -n "${BUF_BREAKING_AGAINST:-}" ]]; then
  echo "check-generated: buf breaking --against '${BUF_BREAKING_AGAINST}'"
  "${BUF}" breaking --against "${BUF_BREAKING_AGAINST}"
fi

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT
scripts/gen-proto.sh "${TMP}" >/dev/null

PY_REL="clients/python/src/orpheus_tts_client/proto/v1"
PY_RELS=("${PY_REL}" "orpheus_svc/proto/admin/v1")
GO_REL="clients/go/gen"
fail=0
if ! diff -r "${TMP}/${GO_REL}" "${GO_REL}" >"${TMP}/go.diff" 2>&1; then
  fail=1
  echo "check-generated: Go stubs in ${GO_REL} are stale:" >&2
  head -n 40 "${TMP}/go.diff" >&2
fi
# Compare only the generated Python files and the proto copies (the package's __init__.py
# files are hand-kept),
# in both directions so that a stale stub of a deleted .proto is caught too.
list_py() { (cd "$1" 2>/dev/null && ls -1 | grep -E '(_pb2(_grpc)?\.pyi?|\.proto)$' | LC_ALL=C sort) || true; }
for rel in "${PY_RELS[@]}"; do
  if [[ "$(list_py "${TMP}/${rel}")" != "$(list_py "${rel}")" ]]; then
    fail=1
    echo "check-generated: generated Python file set in ${rel} differs:" >&2
    diff <(list_py "${TMP}/${rel}") <(list_py "${rel}") >&2 || true
  fi
  for f in $(list_py "${TMP}/${rel}"); do
    if ! diff -u "${rel}/${f}" "${TMP}/${rel}/${f}" >"${TMP}/py.diff" 2>&1; then
      fail=1
      echo "check-generated: Python stub ${rel}/${f} is stale:" >&2
      head -n 40 "${TMP}/py.diff" >&2
    fi
  done
done

# The protobuf runtime must not be older than the gencode, nor grpcio older than the
# grpc plugin that wrote *_pb2_grpc.py (both raise at import time otherwise).
PYPROJECT="clients/python/pyproject.toml"
pb_gen="$(sed -n 's/^# Protobuf Python Version: \([0-9.]*\).*/\1/p' "${TMP}/${PY_REL}/tts_pb2.py")"
grpc_gen="$(sed -n "s/^GRPC_GENERATED_VERSION = '\([0-9.]*\)'.*/\1/p" "${TMP}/${PY_REL}/tts_pb2_grpc.py")"
grep -q "\"protobuf>=${pb_gen}," "${PYPROJECT}" || {
  fail=1; echo "check-generated: ${PYPROJECT} must require protobuf>=${pb_gen} (the gencode version)" >&2; }
grep -Eq "\"grpcio>=${grpc_gen}[,\"]" "${PYPROJECT}" || {
  fail=1; echo "check-generated: ${PYPROJECT} must require grpcio>=${grpc_gen} (GRPC_GENERATED_VERSION)" >&2; }

if [[ "${fail}" != 0 ]]; then
  echo >&2
  echo "check-generated: FAILED - the committed generated code (or the client's version bounds)" >&2
  echo "  is out of date with proto/ and the pinned generators." >&2
  echo "  Run: scripts/install-tools.sh && scripts/gen-proto.sh   and commit the result" >&2
  echo "  (and fix the bounds in clients/python/pyproject.toml if named above)." >&2
  exit 1
fi
echo "check-generated: OK (lint clean, generated code up to date)"
