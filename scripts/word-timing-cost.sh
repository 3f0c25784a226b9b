#!/usr/bin/env bash
# What word timings cost the server: CPU seconds per audio second with every session asking
# for them against none, at $CONC back-to-back sessions on the sim (docs/api.md, "Word
# timings"; issue 46's acceptance: at most 10% more at 512). Runs off/on alternately,
# $REPEAT times each, one server per run, in one window; prints each run's cpu/aud and the
# ratio of the medians.
#
#   scripts/word-timing-cost.sh bench/results/word-timing-cost
#   Env: CONC (512), ROUNDS (1), REPEAT (2), PORT (50074), and bench-server.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:?usage: $0 RESULTS_DIR}
CONC=${CONC:-512}
ROUNDS=${ROUNDS:-1}
REPEAT=${REPEAT:-2}
PORT=${PORT:-50074}
mkdir -p "$RESULTS"
OUT=${XDG_CACHE_HOME:-$HOME/.cache}/orpheus-bench/raw/$(basename "$RESULTS")  # server logs
. scripts/bench-server.sh
trap stop_server EXIT

run_one() {  # $1 = name, $2.. = bench flags
  local name=$1; shift
  LOG_SUFFIX="-$name" start_server conversational
  PYTHONPATH=bench taskset -c "$LOAD_CORE" "$BENCH" scaling --target "localhost:$PORT" \
    --pace none --concurrent "$CONC" --rounds "$ROUNDS" --server-pid "$SERVER_PID" \
    --sim-profile "$PROFILE" --label "$name" --no-raw \
    --output "$RESULTS/$name.summary.json" "$@" > "$RESULTS/$name.txt" 2>&1
  stop_server
}

for k in $(seq "$REPEAT"); do
  run_one "off-$k"
  run_one "on-$k" --word-timestamps
done

"$PY" - "$RESULTS" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.summary.json")):
    run = json.loads(f.read_text())["runs"][-1]
    cpu = run["server"]["cpu_s_per_audio_s"]
    rows.setdefault(f.name.split("-")[0], []).append(cpu)
    print(f"{f.name.removesuffix('.summary.json'):8s} cpu/aud {cpu:.4f}  ok {run['success_rate']:.3f}")
ratio = statistics.median(rows["on"]) / statistics.median(rows["off"])
print(f"timings on / off, median cpu per audio second: {ratio:.3f}x")
(out / "verdict.json").write_text(json.dumps({"off": rows["off"], "on": rows["on"],
                                              "ratio": ratio}, indent=1) + "\n")
PY
