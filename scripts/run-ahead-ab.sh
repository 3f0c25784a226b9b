#!/usr/bin/env bash
# Run-ahead under load (issue 32 item 2): the share of the graph engine's steps launched
# while the step before was in flight, this code against BASE_REF, in one window. A
# benchmark, not a test.
#
#   BASE_REF=<ref> scripts/run-ahead-ab.sh [OUT_DIR]   (default bench/results/run-ahead-ab-<date>)
#
# The graph backend (DEVICE, default cpu: the demo model, no CUDA graphs; on a GPU give MODEL)
# with $SLOTS slots, row budget on, pinned to core $SERVER_CORE; `orpheus-bench scaling` with
# $CONC playout-paced conversational sessions ($ROUNDS rounds) pinned to core $LOAD_CORE,
# unseeded and seeded, against both servers in turn, alternated, $REPEAT times. Per run:
# the steps the graph backend counted as launched ahead (its own timing lines, in both
# versions: engine/graph/timing.py), TTFB p95 and sessions that underran. OUT_DIR gets
# NAME.summary.json per run and report.json; server logs go to RAW_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-bench/results/run-ahead-ab-$(date +%Y%m%d-%H%M)}
RAW_DIR=${RAW_DIR:-${ORPHEUS_BENCH_RAW:-${XDG_CACHE_HOME:-$HOME/.cache}/orpheus-bench/raw}/$(basename "$RESULTS")}
CONC=${CONC:-6}
ROUNDS=${ROUNDS:-1}
REPEAT=${REPEAT:-2}
PORT=${PORT:-50077}
SLOTS=${SLOTS:-16}
DEVICE=${DEVICE:-cpu}
BASE_REF=${BASE_REF:?BASE_REF: the commit to compare with}
mkdir -p "$RESULTS" "$RAW_DIR"
OUT=$RAW_DIR
SERVER_CMD=".venv/bin/orpheus-svc serve --backend graph --device $DEVICE ${MODEL:+--model $MODEL}"
. scripts/bench-server.sh

BASE_DIR=$(mktemp -d)/base
git worktree add --detach "$BASE_DIR" "$BASE_REF" >/dev/null
cleanup() { stop_server; git worktree remove --force "$BASE_DIR" >/dev/null 2>&1 || true; }
trap cleanup EXIT

run_one() {  # $1 = name, $2 = server source dir ("" = this checkout), $3.. = bench flags
  local name=$1 src=$2; shift 2
  LOG_SUFFIX="-$name" PYTHONPATH="${src:-bench}" start_server conversational
  PYTHONPATH=bench taskset -c "$LOAD_CORE" "$BENCH" scaling --target "localhost:$PORT" \
    --pace playout --concurrent "$CONC" --rounds "$ROUNDS" --server-pid "$SERVER_PID" \
    --label "$name" --output "$RESULTS/$name.summary.json" --no-raw "$@" \
    2> >(tee "$RESULTS/$name.txt" >&2)
  sleep 11  # the graph backend's timing line for the last window (every 10 s)
  stop_server
  grep -a "launched ahead" "$OUT/server-conversational-$name.log" > "$RESULTS/$name.steps.txt" || true
}

for k in $(seq "$REPEAT"); do
  run_one "ours-unseeded-$k" ""
  run_one "base-unseeded-$k" "$BASE_DIR"
  run_one "ours-seeded-$k" "" --seeded
  run_one "base-seeded-$k" "$BASE_DIR" --seeded
done
echo "base: $(git rev-parse --short "$BASE_REF"), ours: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + uncommitted'), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" \
  | tee "$RESULTS/window.txt"
"$PY" - "$RESULTS" <<'EOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {}
for p in sorted(out.glob("*.summary.json")):
    name = p.name[:-len(".summary.json")]
    (r,) = json.loads(p.read_text())["runs"]
    steps = ahead = 0
    for line in (out / f"{name}.steps.txt").read_text().splitlines():
        m = re.search(r": (\d+) steps, (\d+)% launched ahead", line)
        if m:  # the percentage of each window, weighted by its steps
            steps += int(m.group(1))
            ahead += int(m.group(1)) * int(m.group(2)) / 100
    runs[name] = {"steps": steps, "ahead_share": round(ahead / steps, 3) if steps else None,
                  "ttfb_p95_ms": round(r["ttfb_ms"]["p95"], 1),
                  "sessions_underran": r["underruns"]["sessions_with_underrun"],
                  "succeeded": r["succeeded"], "sessions": r["sessions"]}
(out / "report.json").write_text(json.dumps(runs, indent=1) + "\n")
print(f"{'run':<20} {'steps':>6} {'ahead':>6} {'TTFB p95':>9} {'underran':>8}")
for name, r in runs.items():
    print(f"{name:<20} {r['steps']:>6} {r['ahead_share']!s:>6} {r['ttfb_p95_ms']:>9} "
          f"{r['sessions_underran']:>8}")
EOF
