#!/usr/bin/env bash
# Soak test (issue 10): a sim-backend server on a free local port, then scripts/soak.py
# drives SESSIONS sessions at it (ok, cancelled, garbage, bad first message, idle, stalled,
# refused), measures the server's RSS and open fds before, after the warm-up and at the end,
# checks GetStatus for open calls and slots left, and writes JSON. Exit 1 on a leak.
#
# Usage: scripts/soak.sh [OUT_JSON]      (default bench/results/soak.json)
# Env:   SESSIONS (10000), WARMUP (1000), CONCURRENCY (48), SEED (1)
# Not part of the test suite: it takes minutes. Results: RELIABILITY.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
PY=.venv/bin/python
OUT="${1:-bench/results/soak.json}"
PORT="$("${PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
LOG="$(mktemp -t orpheus-soak-XXXX.log)"

# Small timeouts so idle and stalled sessions end within the soak; a wait queue as deep
# as the client's concurrency so nothing is refused for capacity.
"${PY}" -m orpheus_svc.app.cli serve --host 127.0.0.1 --port "${PORT}" \
  --set engine.backend=sim --set engine.max_sessions=64 --set engine.max_batch_size=64 \
  --set engine.max_waiting=128 --set session.idle_timeout_seconds=1 \
  --set session.stalled_consumer_timeout_seconds=2 --set server.log_level=warning \
  >"${LOG}" 2>&1 &
SERVER=$!
trap 'kill "${SERVER}" 2>/dev/null || true; wait "${SERVER}" 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do
  if "${PY}" - "${PORT}" <<'PY' 2>/dev/null; then break; fi
import sys, grpc
from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as hg
ch = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
st = hg.HealthStub(ch).Check(h.HealthCheckRequest(), timeout=1).status
sys.exit(0 if st == h.HealthCheckResponse.SERVING else 1)
PY
  sleep 0.2
done

echo "soak: server pid ${SERVER} on 127.0.0.1:${PORT}, log ${LOG}"
"${PY}" scripts/soak.py --target "127.0.0.1:${PORT}" --pid "${SERVER}" \
  --sessions "${SESSIONS:-10000}" --warmup "${WARMUP:-1000}" \
  --concurrency "${CONCURRENCY:-48}" --stall-timeout 2 --seed "${SEED:-1}" --out "${OUT}"
