#!/usr/bin/env bash
# What tracing costs the server (issue 35): a host-speed A/B, GPU-simulated (sim backend),
# server CPU measured. A benchmark, not a test.
#
#   scripts/tracing-ab.sh [OUT_DIR]      (default bench/results/tracing-ab-<date>)
#
# The sim-paced server (profile $PROFILE, row budget on) pinned to core $SERVER_CORE;
# `orpheus-bench scaling --pace none` with $CONC back-to-back conversational sessions
# ($ROUNDS rounds each) pinned to core $LOAD_CORE, against three servers in turn, alternated,
# $REPEAT times, in one window:
#
#   base-K  the code before tracing ($BASE_REF, default the parent of the first tracing
#           commit), from a worktree under $TMPDIR, on this checkout's venv
#   off-K   this code, tracing off (no OTEL_* variable: the default)
#   on-K    this code, tracing on at ratio 1.0 (every call sampled), exporting OTLP/gRPC to
#           a local sink on the load core (bench/orpheus_bench/otlpsink.py): for information
#
# Then the report (bench/orpheus_bench/tracingab.py): CPU-seconds per audio-second per
# group, off/base and on/base, and whether off is within the base runs' own spread.
# OUT_DIR gets NAME.summary.json per run and report.json; server logs and raw session
# records go to RAW_DIR (outside the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-bench/results/tracing-ab-$(date +%Y%m%d-%H%M)}
RAW_DIR=${RAW_DIR:-${ORPHEUS_BENCH_RAW:-${XDG_CACHE_HOME:-$HOME/.cache}/orpheus-bench/raw}/$(basename "$RESULTS")}
CONC=${CONC:-256}
ROUNDS=${ROUNDS:-2}
REPEAT=${REPEAT:-2}
PORT=${PORT:-50075}
SINK_PORT=${SINK_PORT:-50076}
BASE_REF=${BASE_REF:-$(git log --format=%H --grep='^Tracing and SLO metrics (issue 35)' -n 1)^}
mkdir -p "$RESULTS" "$RAW_DIR"
OUT=$RAW_DIR
. scripts/bench-server.sh
export ORPHEUS_SIM_STATS_FILE=$RAW_DIR/sim-stats-$PORT.json

BASE_DIR=$(mktemp -d)/base
git worktree add --detach "$BASE_DIR" "$BASE_REF" >/dev/null
SINK_PID=
cleanup() {
  stop_server
  [ -n "$SINK_PID" ] && kill "$SINK_PID" 2>/dev/null || true
  git worktree remove --force "$BASE_DIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT
PYTHONPATH=bench taskset -c "$LOAD_CORE" "$PY" -m orpheus_bench.otlpsink --port "$SINK_PORT" \
  --count-file "$RESULTS/spans-exported.txt" &
SINK_PID=$!

run_one() {  # $1 = name, $2 = server source dir ("" = this checkout), $3.. = server flags
  # The load generator is always this checkout's; only the server comes from $2.
  local name=$1 src=$2; shift 2
  LOG_SUFFIX="-$name" PYTHONPATH="${src:-bench}" start_server conversational "$@"
  PYTHONPATH=bench taskset -c "$LOAD_CORE" "$BENCH" scaling --target "localhost:$PORT" \
    --pace none --concurrent "$CONC" --rounds "$ROUNDS" --server-pid "$SERVER_PID" \
    --sim-profile "$PROFILE" --sim-stats "$ORPHEUS_SIM_STATS_FILE" --label "$name" \
    --output "$RESULTS/$name.summary.json" --raw "$RAW_DIR/$name.raw.json" \
    2> >(tee "$RESULTS/$name.txt" >&2)
  stop_server
}

for k in $(seq "$REPEAT"); do
  run_one "base-$k" "$BASE_DIR"
  run_one "off-$k" ""
  # the tracing variables reach the server only, not the load generator
  SERVER_CMD="env OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$SINK_PORT OTEL_SERVICE_NAME=orpheus-svc-ab $SERVER_CMD" \
    run_one "on-$k" "" --set telemetry.trace_sample_ratio=1.0
done
kill "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true; SINK_PID=

echo "base: $(git rev-parse --short "$BASE_REF"), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$RESULTS/window.txt"
PYTHONPATH=bench "$PY" -m orpheus_bench.tracingab "$RESULTS" --json "$RESULTS/report.json"
