#!/usr/bin/env bash
# Seeded load must cost no capacity (issue 33): the benchmark guard a reviewer can rerun.
#
#   scripts/seed-load-guard.sh [OUT_DIR]      (default bench/results/seed-guard-<date>)
#
# The sim-paced server (profile $PROFILE, row budget on) pinned to core $SERVER_CORE;
# `orpheus-bench scaling --pace none` with $CONC back-to-back conversational sessions
# ($ROUNDS rounds each) pinned to core $LOAD_CORE, once unseeded and once seeded, alternated,
# $REPEAT times, in one window. Then the guard: the seeded runs' CPU-seconds per audio-second
# within 10% of the unseeded runs' (mean against mean), and every run at TTFB p95 <= 150 ms
# with no underrun. Exit 0 when it holds, 1 when not (the verdict says which bound failed).
#
# BASE_REF (optional): a git ref whose server runs the same pair in the same window, after
# each of ours (an A/B of a hot-path change: both servers' rows land in the verdict). Its
# worktree goes under $TMPDIR and is removed at the end; it uses this checkout's venv.
#
# OUT_DIR gets NAME.summary.json per run and verdict.json; server logs and raw session
# records go to RAW_DIR (outside the repository, as in scripts/capacity-run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-bench/results/seed-guard-$(date +%Y%m%d-%H%M)}
RAW_DIR=${RAW_DIR:-${ORPHEUS_BENCH_RAW:-${XDG_CACHE_HOME:-$HOME/.cache}/orpheus-bench/raw}/$(basename "$RESULTS")}
CONC=${CONC:-512}
ROUNDS=${ROUNDS:-2}
REPEAT=${REPEAT:-2}
PORT=${PORT:-50073}
mkdir -p "$RESULTS" "$RAW_DIR"
OUT=$RAW_DIR
. scripts/bench-server.sh
export ORPHEUS_SIM_STATS_FILE=$RAW_DIR/sim-stats-$PORT.json

BASE_DIR=
cleanup() {
  stop_server
  if [ -n "$BASE_DIR" ]; then git worktree remove --force "$BASE_DIR" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
if [ -n "${BASE_REF:-}" ]; then
  BASE_DIR=$(mktemp -d)/base
  git worktree add --detach "$BASE_DIR" "$BASE_REF" >/dev/null
fi

run_one() {  # $1 = name, $2 = server source dir ("" = this checkout), $3.. = bench flags
  # The load generator is always this checkout's; only the server comes from $2.
  local name=$1 src=$2; shift 2
  LOG_SUFFIX="-$name" PYTHONPATH="${src:-bench}" start_server conversational
  PYTHONPATH=bench taskset -c "$LOAD_CORE" "$BENCH" scaling --target "localhost:$PORT" \
    --pace none --concurrent "$CONC" --rounds "$ROUNDS" --server-pid "$SERVER_PID" \
    --sim-profile "$PROFILE" --sim-stats "$ORPHEUS_SIM_STATS_FILE" --label "$name" \
    --output "$RESULTS/$name.summary.json" --raw "$RAW_DIR/$name.raw.json" "$@" \
    2> >(tee "$RESULTS/$name.txt" >&2)
  stop_server
}

for k in $(seq "$REPEAT"); do
  run_one "unseeded-$k" "" --seed -1
  run_one "seeded-$k" "" --seed 1
  if [ -n "$BASE_DIR" ]; then
    run_one "base-unseeded-$k" "$BASE_DIR" --seed -1
    run_one "base-seeded-$k" "$BASE_DIR" --seed 1
  fi
done

PYTHONPATH=bench "$PY" -m orpheus_bench.seedguard "$RESULTS" --json "$RESULTS/verdict.json"
