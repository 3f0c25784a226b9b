#!/usr/bin/env bash
# Capacity study (issue 5): sim-paced server on one core, orpheus-bench tuning on the other.
#
#   scripts/capacity-run.sh [OUT_DIR]        (default bench/results/capacity-<date>)
#
# For each text set (conversational, longform) and input style (whole, streaming): start
# the server with the sim backend (GPU simulated: engine/sim/profiles.py, docs/capacity.md)
# pinned to core $SERVER_CORE, run `orpheus-bench tuning` pinned to $LOAD_CORE, write the
# results, then stop the server. Everything else running on the machine competes for the
# same cores: run it on a quiet machine; the results record how busy the machine was.
#
# What goes where (issue 16): OUT_DIR, in the repository, gets only what is committed: per
# run NAME.summary.json (settings, per level the table row, percentiles, host figures, and
# the sim's host-bound steps and step-time distribution) and NAME.txt (the table). The raw
# JSON with every session's record, the server logs, the plots and py-spy profiles go to
# RAW_DIR, outside the repository: $ORPHEUS_BENCH_RAW/<OUT_DIR's name> (default
# ~/.cache/orpheus-bench/raw/<OUT_DIR's name>). Copy a plot into OUT_DIR only if a doc shows it.
#
# Environment: SETS ("conversational longform"), INPUTS ("whole streaming"), START (64: first
# concurrency tried), PROFILE (h100-fp8), PORT (50071), SERVER_CORE (0), LOAD_CORE (1), SLOTS (1024:
# KV slots and batch cap), WAITING (admission queue, default SLOTS),
# SERVER_CMD (default: orpheus-svc serve --backend sim ...; scheduler variants with
# "$PY -m orpheus_bench.policies --policy fifo|round_robin ..." or
# --set engine.max_ahead_seconds=S),
# EXTRA (extra orpheus-bench flags), PYSPY=1 to record
# a py-spy profile of the server during a 60 s run at the found capacity,
# PACES ("playout"): "playout none" adds the continuous-load sets, where each session slot
# starts its next call as soon as the last one ends (`--pace none`: every stream generating
# at once, the host's worst case, issue 16); "none" runs only those. CONT_SETS
# ("conversational longform") and CONT_INPUTS ("whole") choose the continuous-load sets.
# TOPOLOGIES ("single"): "single split" also runs every set with server.topology=split and
# FRONTENDS (2) gRPC front-end processes (docs/architecture.md); those runs are named
# NAME-split. All server processes inherit the server core's pinning; the bench's server CPU
# figure counts the supervisor and every process below it (orpheus_bench/procstat.py).
# FLOOR (1): first, with nothing else running, measure the machine's own floor for the sim's
# host-bound steps on the server core (orpheus_bench.wakefloor: a no-work thread pacing
# FLOOR_STEPS (14000) steps of FLOOR_STEP_MS (10) ms with 1 ms of work between them) into
# OUT_DIR/wake-floor.summary.json. A run's host_bound_steps below that floor say nothing of
# the server. FLOOR=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-bench/results/capacity-$(date +%Y%m%d-%H%M)}
RAW_DIR=${RAW_DIR:-${ORPHEUS_BENCH_RAW:-${XDG_CACHE_HOME:-$HOME/.cache}/orpheus-bench/raw}/$(basename "$RESULTS")}
mkdir -p "$RESULTS"
PORT=${PORT:-50071}
OUT=$RAW_DIR  # bench-server.sh writes the server logs to $OUT
. scripts/bench-server.sh
trap stop_server EXIT
# The sim server writes its step counters here; orpheus-bench reads them (GPU or host?).
export ORPHEUS_SIM_STATS_FILE=${ORPHEUS_SIM_STATS_FILE:-$RAW_DIR/sim-stats-$PORT.json}

if [ "${FLOOR:-1}" = 1 ]; then
  PYTHONPATH=bench taskset -c "$SERVER_CORE" "$PY" -m orpheus_bench.wakefloor \
    --steps "${FLOOR_STEPS:-14000}" --step-ms "${FLOOR_STEP_MS:-10}" --work-ms 1 \
    --json "$RESULTS/wake-floor.summary.json" | tee "$RESULTS/wake-floor.txt"
fi

run_set() {  # $1 = text set, $2 = input, $3 = pace, $4 = topology
  local set=$1 input=$2 pace=$3 topology=${4:-single} rounds=2 name
  [ "$set" = longform ] && rounds=1
  name="$set-$input"
  [ "$pace" = none ] && name="$name-pace-none"
  local sfx=""; [ "$pace" = none ] && sfx=-pace-none
  local topo_args=()
  if [ "$topology" = split ]; then
    name="$name-split"; sfx="$sfx-split"
    topo_args=(--set server.topology=split --set "server.frontends=${FRONTENDS:-2}")
  fi
  rm -f "$ORPHEUS_SIM_STATS_FILE"
  LOG_SUFFIX=$sfx start_server "$set" "${topo_args[@]}"
  taskset -c "$LOAD_CORE" $BENCH tuning --target "localhost:$PORT" --text-set "$set" \
    --input "$input" --pace "$pace" --rounds "$rounds" --start "${START:-64}" --factor 2 \
    --resolution 0.1 --server-pid "$SERVER_PID" --sim-profile "$PROFILE" \
    --sim-stats "$ORPHEUS_SIM_STATS_FILE" --label "capacity $name" \
    --output "$RESULTS/$name.summary.json" --raw "$RAW_DIR/$name.raw.json" \
    --plot "$RAW_DIR/plots-$name" ${EXTRA:-} 2>&1 | tee "$RESULTS/$name.txt"
  if [ "${PYSPY:-0}" = 1 ]; then
    cap=$("$PY" -c "import json; print(json.load(open('$RESULTS/$name.summary.json'))['tuning']['max_passing_concurrency'] or 64)")
    (taskset -c "$LOAD_CORE" $BENCH scaling --target "localhost:$PORT" --text-set "$set" \
       --input "$input" --pace "$pace" --concurrent "$cap" --duration 60 --warmup 0 \
       --output "$RESULTS/$name-profiled.summary.json" \
       --raw "$RAW_DIR/$name-profiled.raw.json" >/dev/null 2>&1 &)
    sleep 20
    taskset -c "$LOAD_CORE" .venv/bin/py-spy record --pid "$SERVER_PID" --duration 30 \
      --rate 200 --format speedscope -o "$RAW_DIR/$name-pyspy.json" || true
    sleep 45
  fi
  stop_server
}

for pace in ${PACES:-playout}; do
  if [ "$pace" = none ]; then sets=${CONT_SETS:-conversational longform}; inputs=${CONT_INPUTS:-whole}
  else sets=${SETS:-conversational longform}; inputs=${INPUTS:-whole streaming}; fi
  for set in $sets; do
    for input in $inputs; do
      for topology in ${TOPOLOGIES:-single}; do
        run_set "$set" "$input" "$pace" "$topology"
      done
    done
  done
done
echo "summaries in $RESULTS; raw results, server logs and plots in $RAW_DIR"
