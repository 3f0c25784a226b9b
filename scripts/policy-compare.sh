#!/usr/bin/env bash
# Scheduling comparison (issue 5): the same load against each scheduler policy.
#
#   scripts/policy-compare.sh [OUT_DIR]     (default bench/results/policy-<date>)
#
# The server (sim backend, GPU simulated) runs pinned to one core with the batch capped at
# $BATCH rows per step, so the policy has to choose; the load generator runs on the other
# core with `orpheus-bench scaling --concurrent $CONCURRENT` (conversational text, whole).
# The server has one batch order (deadline); the baselines are bench/orpheus_bench/policies.py,
# whose entry point starts `orpheus-svc serve` with the order injected.
# Environment: POLICIES ("deadline fifo round_robin"), BATCH (16), CONCURRENT (64,96),
# PROFILE (h100-fp8), PORT (50072), SERVER_CORE (0), LOAD_CORE (1), SLOTS (1024).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/policy-$(date +%Y%m%d-%H%M)}
PORT=${PORT:-50072}
BATCH=${BATCH:-16}
CONCURRENT=${CONCURRENT:-64,96}
. scripts/bench-server.sh
trap stop_server EXIT

for policy in ${POLICIES:-deadline fifo round_robin}; do
  SERVER_CMD="$PY -m orpheus_bench.policies --policy $policy --backend sim --sim-profile $PROFILE" \
    LOG_SUFFIX="-$policy" start_server conversational --set engine.max_batch_size="$BATCH"
  taskset -c "$LOAD_CORE" $BENCH scaling --target "localhost:$PORT" --concurrent "$CONCURRENT" \
    --warmup 1 --server-pid "$SERVER_PID" --sim-profile "$PROFILE" \
    --label "policy $policy, max_batch_size $BATCH" --output "$OUT/$policy.summary.json" \
    2>&1 | tee "$OUT/$policy.txt"
  stop_server
done
echo "results in $OUT"
