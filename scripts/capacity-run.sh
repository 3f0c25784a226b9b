#!/usr/bin/env bash
# Capacity study (issue 5): sim-paced server on one core, orpheus-bench tuning on the other.
#
#   scripts/capacity-run.sh [OUT_DIR]        (default bench/results/capacity-<date>)
#
# For each text set (conversational, longform) and input style (whole, streaming): start
# the server with the sim backend (GPU simulated: engine/sim/profiles.py, docs/capacity.md)
# pinned to core $SERVER_CORE, run `orpheus-bench tuning` pinned to $LOAD_CORE, write JSON
# and plots, then stop the server. Everything else running on the machine competes for
# the same cores: run it on a quiet machine; the JSON records how busy the machine was.
#
# Environment: SETS ("conversational longform"), INPUTS ("whole streaming"), START (64: first
# concurrency tried), PROFILE (h100-fp8), PORT (50071), SERVER_CORE (0), LOAD_CORE (1), SLOTS (1024:
# KV slots and batch cap), WAITING (admission queue, default SLOTS),
# SERVER_CMD (default: orpheus-svc serve --backend sim ...; scheduler variants with
# "$PY -m orpheus_bench.policies --policy fifo|round_robin ..." or
# --set engine.max_ahead_seconds=S),
# EXTRA (extra orpheus-bench flags), PYSPY=1 to record
# a py-spy profile of the server during a 60 s run at the found capacity.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/capacity-$(date +%Y%m%d-%H%M)}
PORT=${PORT:-50071}
. scripts/bench-server.sh
trap stop_server EXIT

for set in ${SETS:-conversational longform}; do
  rounds=2; [ "$set" = longform ] && rounds=1
  for input in ${INPUTS:-whole streaming}; do
    start_server "$set"
    name="$set-$input"
    taskset -c "$LOAD_CORE" $BENCH tuning --target "localhost:$PORT" --text-set "$set" \
      --input "$input" --rounds "$rounds" --start "${START:-64}" --factor 2 --resolution 0.1 \
      --server-pid "$SERVER_PID" --sim-profile "$PROFILE" --label "capacity $name" \
      --output "$OUT/$name.json" --plot "$OUT/plots-$name" ${EXTRA:-} 2>&1 | tee "$OUT/$name.txt"
    if [ "${PYSPY:-0}" = 1 ]; then
      cap=$("$PY" -c "import json; print(json.load(open('$OUT/$name.json'))['tuning']['max_passing_concurrency'] or 64)")
      (taskset -c "$LOAD_CORE" $BENCH scaling --target "localhost:$PORT" --text-set "$set" \
         --input "$input" --concurrent "$cap" --duration 60 --warmup 0 \
         --output "$OUT/$name-profiled.json" >/dev/null 2>&1 &)
      sleep 20
      taskset -c "$LOAD_CORE" .venv/bin/py-spy record --pid "$SERVER_PID" --duration 30 \
        --rate 200 --format speedscope -o "$OUT/$name-pyspy.json" || true
      sleep 45
    fi
    stop_server
  done
done
echo "results in $OUT"
