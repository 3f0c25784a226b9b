#!/usr/bin/env bash
# grpcurl smoke over TLS with an API key (docs/security.md): a second live demo server with
# server.tls_cert_file/tls_key_file/api_keys_file; certificates made here with openssl.
# Checks: health SERVING over TLS without a key; a call without a key is Unauthenticated;
# with the key Synthesize streams audio; plaintext is refused. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${PWD}/.tools/bin:${PATH}"
PY=.venv/bin/python
D="$(mktemp -d)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=smoke CA" -keyout "${D}/ca.key" -out "${D}/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
  -keyout "${D}/tls.key" -out "${D}/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"${D}/ext.cnf"
openssl x509 -req -in "${D}/tls.csr" -CA "${D}/ca.crt" -CAkey "${D}/ca.key" -CAcreateserial \
  -days 2 -extfile "${D}/ext.cnf" -out "${D}/tls.crt" 2>/dev/null
KEY="ok_smoke-$(openssl rand -hex 16)"
printf 'keys:\n  - name: smoke\n    sha256: %s\n' \
  "$(printf '%s\n' "${KEY}" | "${PY}" -m orpheus_svc.security hash)" >"${D}/keys.yaml"
PORT="$("${PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ADDR="127.0.0.1:${PORT}"
LOG="${D}/server.log"
.venv/bin/orpheus-svc serve --host 127.0.0.1 --port "${PORT}" \
  --set server.tls_cert_file="${D}/tls.crt" --set server.tls_key_file="${D}/tls.key" \
  --set server.api_keys_file="${D}/keys.yaml" >"${LOG}" 2>&1 &
SERVER=$!
cleanup() { kill "${SERVER}" 2>/dev/null || true; rm -rf "${D}"; }
trap cleanup EXIT
# Reflection needs a key on this server, so the keyless health checks name the health
# service's messages from a proto written here (grpc.health.v1, the two messages used).
cat >"${D}/health.proto" <<'PROTO'
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
PROTO
TLS=(-cacert "${D}/ca.crt")
HP=(-import-path "${D}" -proto health.proto)
for _ in $(seq 1 600); do
  if grpcurl "${TLS[@]}" "${HP[@]}" -max-time 2 -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check \
      2>/dev/null | grep -q '"SERVING"'; then break; fi
  kill -0 "${SERVER}" 2>/dev/null || { echo "tls server exited:"; cat "${LOG}"; exit 1; }
  sleep 0.2
done
grep -q '"SERVING"' <<<"$(grpcurl "${TLS[@]}" "${HP[@]}" -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check)" \
  || { echo "tls server never became SERVING:"; cat "${LOG}"; exit 1; }
if grpcurl -plaintext "${HP[@]}" -max-time 3 -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check \
    >/dev/null 2>&1; then echo "plaintext was answered on a TLS port"; exit 1; fi
# without a key: the Synthesize call itself (its proto from the repo) and reflection refused
if grpcurl "${TLS[@]}" -import-path proto -proto orpheus/tts/v1/tts.proto \
    -d '{"text":"Hi.","voice":"tara"}' "${ADDR}" \
    orpheus.tts.v1.TTSService/Synthesize >/dev/null 2>"${D}/err"; then
  echo "a call without a key was accepted"; exit 1; fi
grep -q 'Unauthenticated' "${D}/err" && grep -q 'Bearer' "${D}/err"
if grpcurl "${TLS[@]}" "${ADDR}" list >/dev/null 2>"${D}/err"; then
  echo "reflection answered without a key"; exit 1; fi
grep -q 'Unauthenticated' "${D}/err"
AUTH=(-H "authorization: Bearer ${KEY}")
grep -qx 'orpheus.tts.v1.TTSService' <<<"$(grpcurl "${TLS[@]}" "${AUTH[@]}" "${ADDR}" list)"
grpcurl "${TLS[@]}" "${AUTH[@]}" -d '{"text":"Hello there.","voice":"tara"}' "${ADDR}" \
  orpheus.tts.v1.TTSService/Synthesize >"${D}/synth"
grep -q '"summary"' "${D}/synth" && grep -q '"audio"' "${D}/synth"
# the Go CLI and orpheus-say (Python) over TLS: refused without the key, a WAV with it
(cd clients/go && go build -o "${D}/orpheus-say-go" ./cmd/orpheus-say)
if ORPHEUS_API_KEY= "${D}/orpheus-say-go" -server "${ADDR}" -ca-file "${D}/ca.crt" -o "${D}/x.wav" \
    "Hi." 2>"${D}/err"; then echo "Go CLI: accepted without a key"; exit 1; fi
grep -q 'Bearer' "${D}/err"
ORPHEUS_API_KEY="${KEY}" "${D}/orpheus-say-go" -server "${ADDR}" -ca-file "${D}/ca.crt" -q \
  -o "${D}/go.wav" "Hello from Go."
test -s "${D}/go.wav"
.venv/bin/orpheus-say "Hello from Python." --server "${ADDR}" --ca-file "${D}/ca.crt" \
  --api-key "${KEY}" -q -o "${D}/py.wav"
test -s "${D}/py.wav"
if grep -q "${KEY}" "${LOG}"; then echo "the key reached the server log"; exit 1; fi
echo "grpcurl TLS + API key smoke: OK"
kill -TERM "${SERVER}"
wait "${SERVER}" || { echo "tls server did not shut down cleanly:"; tail -20 "${LOG}"; exit 1; }
trap - EXIT
rm -rf "${D}"
