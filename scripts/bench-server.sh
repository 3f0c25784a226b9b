# Sourced by the benchmark scripts: start and stop a sim-paced server pinned to one core.
# The caller sets OUT (created here) and PORT; the rest default below. WAITING (default
# SLOTS) sizes the admission queue. ROW_BUDGET (1) turns on engine.row_budget as the GPU
# overlay does (0: off, e.g. for code from before the setting existed).
PROFILE=${PROFILE:-h100-fp8}
SERVER_CORE=${SERVER_CORE:-0}
LOAD_CORE=${LOAD_CORE:-1}
SLOTS=${SLOTS:-1024}
PY=${PY:-.venv/bin/python}
SERVER_CMD=${SERVER_CMD:-.venv/bin/orpheus-svc serve --backend sim --sim-profile $PROFILE}
BENCH=${BENCH:-.venv/bin/orpheus-bench}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-bench}

start_server() {  # $1 = profile (conversational | longform); further args go to the server
  local profile=$1; shift
  local budget=()
  [ "${ROW_BUDGET:-1}" = 1 ] && budget=(--set engine.row_budget=true)
  taskset -c "$SERVER_CORE" $SERVER_CMD --port "$PORT" --profile "$profile" "${budget[@]}" \
    --set engine.max_sessions="$SLOTS" --set engine.max_batch_size="$SLOTS" \
    --set engine.max_waiting="${WAITING:-$SLOTS}" "$@" \
    >"$OUT/server-$profile${LOG_SUFFIX:-}.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 120); do
    if "$PY" -c "import grpc,sys; from orpheus_tts_client.proto.v1 import tts_pb2 as p, tts_pb2_grpc as g
c=grpc.insecure_channel('localhost:$PORT'); s=g.TTSServiceStub(c).GetStatus(p.GetStatusRequest(), timeout=1)
sys.exit(0 if s.serving else 1)" 2>/dev/null; then return 0; fi
    sleep 1
  done
  echo "server did not start; see $OUT/server-$profile${LOG_SUFFIX:-}.log" >&2
  return 1
}

stop_server() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
