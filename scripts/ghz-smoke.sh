#!/usr/bin/env bash
# ghz load smoke from reflection alone (issue 29): a live server on the sim backend (real
# gRPC edge, sessions and reflection; steps paced like a GPU, no compute, so 64 calls take
# about a second on a CPU) and the pinned ghz (scripts/install-tools.sh), given no proto
# files: ghz resolves the method through grpc.reflection (v1, else v1alpha). Checks: 64
# Synthesize calls all OK; 8 StreamingSynthesize calls of five messages each (config, three
# text fragments, flush) all OK, and the server spoke two segments in each. Called by
# scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${PWD}/.tools/bin:${PATH}"
PY=.venv/bin/python
D="$(mktemp -d)"
PORT="$("${PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
ADDR="127.0.0.1:${PORT}"
LOG="${D}/server.log"
.venv/bin/orpheus-svc serve --host 127.0.0.1 --port "${PORT}" --set engine.backend=sim \
  --set server.drain_delay_seconds=0 >"${LOG}" 2>&1 &
SERVER=$!
cleanup() { kill "${SERVER}" 2>/dev/null || true; rm -rf "${D}"; }
trap cleanup EXIT
for _ in $(seq 1 600); do
  if grpcurl -plaintext -max-time 2 -d '{"service":""}' "${ADDR}" grpc.health.v1.Health/Check \
      2>/dev/null | grep -q '"SERVING"'; then break; fi
  kill -0 "${SERVER}" 2>/dev/null || { echo "ghz server exited:"; cat "${LOG}"; exit 1; }
  sleep 0.2
done

# all_ok REPORT N: ghz's JSON report says N calls, every one OK
all_ok() {
  "${PY}" - "$1" "$2" <<'PYCHECK'
import json, sys
report, n = json.load(open(sys.argv[1])), int(sys.argv[2])
codes = report.get("statusCodeDistribution") or {}
if report.get("count") != n or codes != {"OK": n}:
    sys.exit(f"ghz: expected {n} calls all OK, got count={report.get('count')} {codes} "
             f"errors={report.get('errorDistribution')}")
PYCHECK
}

ghz --insecure --call orpheus.tts.v1.TTSService/Synthesize -n 64 -c 16 \
  -d '{"text":"Hi.","voice":"tara"}' -O json -o "${D}/synth.json" "${ADDR}"
all_ok "${D}/synth.json" 64
ghz --insecure --call orpheus.tts.v1.TTSService/StreamingSynthesize -n 8 -c 4 \
  -d '[{"config":{"voice":"tara"}},{"text":"Hello there. "},{"text":"How are"},{"text":" you today?"},{"flush":{}}]' \
  -O json -o "${D}/stream.json" "${ADDR}"
all_ok "${D}/stream.json" 8
# every fragment reached its session: 8 sessions spoke "Hello there." and "How are you today?"
"${PY}" - "${LOG}" <<'PYCHECK'
import json, sys
ends = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
two = [e for e in ends if e.get("event") == "session finished" and e.get("segments") == 2]
if len(two) != 8:
    sys.exit(f"ghz streaming: expected 8 two-segment sessions, got {len(two)}")
PYCHECK
echo "ghz smoke (reflection only): OK"
kill -TERM "${SERVER}"
wait "${SERVER}" || { echo "ghz server did not shut down cleanly:"; tail -20 "${LOG}"; exit 1; }
trap - EXIT
rm -rf "${D}"
