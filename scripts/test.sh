#!/usr/bin/env bash
# The one test command (README, .ci/run): pytest, the API contract checks (buf lint, buf
# breaking against main, stale generated stubs), go vet, and against a live demo-model
# server: the Go client's tests and a grpcurl smoke (list, describe, Synthesize, health);
# then a ghz load from reflection alone (scripts/ghz-smoke.sh, its own sim-backend server);
# the wheels built and installed as users install them (scripts/wheel-smoke.sh); with
# ORPHEUS_IMAGE_CHECK=1 also the CPU container image built and run (scripts/image-check.sh);
# with ORPHEUS_JAEGER_CHECK=1 a real Jaeger receives a call's trace (scripts/jaeger-check.sh);
# with ORPHEUS_K8S_CHECK=1 deploy/k8s on a real single-node Kubernetes (scripts/k8s-check.sh).
# Run scripts/install.sh first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
export PATH="${ROOT}/.tools/bin:${PATH}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${GOFLAGS:-} -buildvcs=false"
PY=.venv/bin/python
step() { printf '\n== %s (at %d s)\n' "$*" "${SECONDS}"; }

step "pytest"
# Two workers (pytest-xdist), each taking a whole test file at a time (--dist loadfile: a
# file's module-scoped servers stay in one process): on this project's 2-core machines one
# pytest process kept about one core busy. PYTEST_WORKERS=0 runs it in one process.
# --durations: the slowest tests (the whole command's budget is 15 minutes here).
"${PY}" -m pytest -q -p no:cacheprovider --durations=25 -n "${PYTEST_WORKERS:-2}" --dist loadfile

step "API contract: buf lint, buf breaking vs main, generated code up to date"
if git rev-parse --verify -q main >/dev/null; then
  BUF_BREAKING_AGAINST='.git#branch=main,subdir=proto' scripts/check-generated.sh
else
  scripts/check-generated.sh
fi

step "go vet"
(cd clients/go && go vet ./...)

step "deploy: manifests (strict decode, kustomize render incl. deploy/observability, checks) and Dockerfile lint"
(cd deploy/k8s/validate && go vet ./... && go test -count=1 ./...)
for overlay in deploy/k8s/overlays/*/ deploy/observability/; do kustomize build "${overlay}" >/dev/null; done
.venv/bin/hadolint --config deploy/docker/.hadolint.yaml deploy/docker/Dockerfile deploy/docker/Dockerfile.cpu

step "wheels: build, twine check, contents, a fresh venv with only the wheels serves the demo"
scripts/wheel-smoke.sh

if [[ "${ORPHEUS_IMAGE_CHECK:-}" == 1 ]]; then
  step "CPU image: buildah build from Debian + PyPI, podman run, SERVING and one Synthesize"
  # the Kubernetes check imports this image: it is kept for that check, which removes it
  if [[ "${ORPHEUS_K8S_CHECK:-}" == 1 && "${KEEP_IMAGE:-}" != 1 ]]; then
    KEEP_IMAGE=1 scripts/image-check.sh
    export K8S_REMOVE_IMAGE=1
  else
    scripts/image-check.sh
  fi
fi

if [[ "${ORPHEUS_K8S_CHECK:-}" == 1 ]]; then
  step "Kubernetes: a real single-node cluster, server dry run of every overlay, cpu-demo deployed, wedge, rollout, scaling through KEDA"
  scripts/k8s-check.sh
fi

if [[ "${ORPHEUS_JAEGER_CHECK:-}" == 1 ]]; then
  step "Jaeger (built from the Go module proxy) stores a call's trace whole"
  scripts/jaeger-check.sh
fi

step "live demo server (traced to a local OTLP receiver): go test + grpcurl"
PORT="$("${PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ADDR="127.0.0.1:${PORT}"
LOG="$(mktemp -t orpheus-svc-XXXX.log)"
# The server's spans, and the Pipecat example's in the plugin tests, go to one receiver
# (tests/telemetry/otlp.py), which writes them to SPANS: the example's trace must continue
# into the server's (tests/plugins/test_examples.py).
SPANS="${LOG%.log}.spans.jsonl"
"${PY}" -m tests.telemetry.otlp --jsonl "${SPANS}" --port-file "${SPANS}.port" &
RECEIVER=$!
for _ in $(seq 1 100); do [[ -s "${SPANS}.port" ]] && break; sleep 0.1; done
OTLP="http://127.0.0.1:$(cat "${SPANS}.port")"
OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT="${OTLP}" OTEL_BSP_SCHEDULE_DELAY=200 \
  .venv/bin/orpheus-svc serve --host 127.0.0.1 --port "${PORT}" >"${LOG}" 2>&1 &
SERVER=$!
cleanup() { kill "${SERVER}" "${RECEIVER}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 360); do
  if grpcurl -plaintext -max-time 2 -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check 2>/dev/null \
      | grep -q '"SERVING"'; then break; fi
  kill -0 "${SERVER}" 2>/dev/null || { echo "server exited:"; cat "${LOG}"; exit 1; }
  sleep 0.5
done
grep -q '"SERVING"' <<<"$(grpcurl -plaintext -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check)" \
  || { echo "server never became SERVING:"; cat "${LOG}"; exit 1; }

(cd clients/go && ORPHEUS_SERVER_ADDR="${ADDR}" go test -count=1 ./...)

# Fresh venvs: the client with protobuf 5.26.1 / grpcio 1.63.2 (its lower bounds), with the
# current pipecat-ai and with the current livekit-agents; client tests in each, and the
# plugin tests against this live server (the Pipecat example's spans to the same receiver).
ORPHEUS_SERVER_ADDR="${ADDR}" ORPHEUS_OTLP_ENDPOINT="${OTLP}" ORPHEUS_SPANS_FILE="${SPANS}" \
  scripts/test-client-compat.sh

# (printed, then checked: `tee /dev/stderr` would truncate a log file stderr points at)
SERVICES="$(grpcurl -plaintext "${ADDR}" list)"
echo "${SERVICES}"
grep -qx 'orpheus.tts.v1.TTSService' <<<"${SERVICES}"
# Output is captured whole before grep reads it: `grpcurl ... | grep -q` under pipefail fails
# with 141 when grep exits at its match while grpcurl still writes (SIGPIPE).
DESCRIBED="$(grpcurl -plaintext "${ADDR}" describe orpheus.tts.v1.TTSService)"
grep -q 'rpc StreamingSynthesize' <<<"${DESCRIBED}"
# a method's own name resolves through reflection (issue 29: ghz and grpcurl ask for it),
# and grpc.reflection.v1 is served beside v1alpha
DESCRIBED="$(grpcurl -plaintext "${ADDR}" describe orpheus.tts.v1.TTSService.Synthesize)"
grep -q 'rpc Synthesize' <<<"${DESCRIBED}"
grep -qx 'grpc.reflection.v1.ServerReflection' <<<"${SERVICES}"
grpcurl -plaintext -d '{"text":"Hello there.","voice":"tara"}' "${ADDR}" \
  orpheus.tts.v1.TTSService/Synthesize >"${LOG}.synth"
grep -q '"summary"' "${LOG}.synth" && grep -q '"audio"' "${LOG}.synth"
HEALTH="$(grpcurl -plaintext -d '{"service":"orpheus.tts.v1.TTSService"}' "${ADDR}" grpc.health.v1.Health/Check)"
grep -q '"SERVING"' <<<"${HEALTH}"
if grpcurl -plaintext -d '{"text":"Hi.","voice":"bob"}' "${ADDR}" orpheus.tts.v1.TTSService/Synthesize \
    >/dev/null 2>"${LOG}.err"; then
  echo "unknown voice was accepted"; exit 1
fi
grep -q 'InvalidArgument' "${LOG}.err"
echo "grpcurl smoke: OK"
scripts/tls-smoke.sh  # a second server with TLS + API keys (issue 13, docs/security.md)
scripts/ghz-smoke.sh  # ghz from reflection alone: 64 Synthesize, 8 StreamingSynthesize (issue 29)

kill -TERM "${SERVER}"
wait "${SERVER}" || { echo "server did not shut down cleanly:"; tail -20 "${LOG}"; exit 1; }
kill "${RECEIVER}" 2>/dev/null || true
trap - EXIT
printf '\nall checks passed in %d s\n' "${SECONDS}"
