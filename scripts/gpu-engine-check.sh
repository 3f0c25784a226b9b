#!/usr/bin/env bash
# The graph engine on a real GPU, in one run of at most ~5 minutes (issue 28; BENCHMARKS.md,
# "The graph engine"):
#
#   scripts/gpu-engine-check.sh OUT_DIR                 # on a CUDA machine (H100 / H200)
#   DEVICE=cpu TINY=1 scripts/gpu-engine-check.sh DIR   # the dry run (tests/bench runs it)
#
# 1. bench/gpu_engine.py: decode step per batch (bf16 and fp8 weights; graph, run-ahead,
#    device-only and eager), the paper floor on the card's measured bandwidth, transformers'
#    generate with a static cache, graph-vs-eager parity, the attention kernel, SNAC; and a
#    random bf16 checkpoint of the Orpheus-3B shapes (HF layout, sharded) for step 2.
# 2. The real server on that checkpoint (graph backend, CUDA graphs, the weights the bench
#    measured fastest at its largest batch: WEIGHTS below) and orpheus-bench,
#    playout-paced, at LEVELS concurrent sessions. Random weights never sample the stop id,
#    so every segment runs to its max_tokens, which the slot bounds (engine.max_seq_len
#    SEQ: about (SEQ - prompt) / 82 seconds of audio per segment).
#
# Writes OUT_DIR/gpu-engine.json, OUT_DIR/summary.json (with the server's rows),
# OUT_DIR/serve.summary.json, OUT_DIR/serve.txt, OUT_DIR/server-steps.txt (the engine's own
# step timings while serving) and OUT_DIR/server-tail.log. PYTHON (python3)
# must have torch with CUDA and the server's dependencies; the checkout is used from
# PYTHONPATH, not installed. SECTIONS picks the bench's sections; SERVE=0 skips step 2.
# NULL_CODEC=1 serves with flusher.null_codec (silence, no SNAC): run step 2 once with and
# once without (SECTIONS= SERVE=1 for the second) to get SNAC's share from the two runs; the
# server's rows say which (null_codec). The run-ahead record (engine/ahead.py) of the
# server goes to summary.json as ahead_share and ahead.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu-engine-check.sh OUT_DIR}
PY=${PYTHON:-python3}
PORT=${PORT:-50073}
DEVICE=${DEVICE:-cuda}
TINY=${TINY:+--tiny}
CKPT=${CKPT:-/tmp/orpheus-3b-random}
if [[ -n "$TINY" ]]; then  # the dry run: small everything, same code paths
  # (bf16u and fp8t run the same code as bf16 and fp8 off CUDA: left out of the dry run)
  BENCH_ARGS=${BENCH_ARGS:---batches 1,8 --steps 4 --parity-steps 21 --hf-batch 4 --snac-windows 1 --dtypes bf16,fp8}
  LEVELS=${LEVELS:-2,4}; SLOTS=${SLOTS:-8}; BATCH=${BATCH:-8}; SEQ=${SEQ:-256}; RAMP=${RAMP:-1}
else
  BENCH_ARGS=${BENCH_ARGS:-}
  LEVELS=${LEVELS:-128,256}; SLOTS=${SLOTS:-320}; BATCH=${BATCH:-256}; SEQ=${SEQ:-512}
  RAMP=${RAMP:-auto}
fi
mkdir -p "$OUT_DIR"
export PYTHONPATH=$PWD:$PWD/bench:$PWD/clients/python/src${PYTHONPATH:+:$PYTHONPATH}
export ORPHEUS_SVC_CACHE=${ORPHEUS_SVC_CACHE:-/tmp/orpheus-cache}
export PYTHONUNBUFFERED=1
say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)" >&2; }

say "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null || true
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), "triton", triton.__version__)'

say "bench/gpu_engine.py"
rm -rf "$CKPT"
timeout "${BENCH_TIMEOUT:-230}" "$PY" bench/gpu_engine.py --device "$DEVICE" $TINY $BENCH_ARGS \
  ${SECTIONS:+--sections "$SECTIONS"} --out "$OUT_DIR" --write-checkpoint "$CKPT" >/dev/null
echo "bench exit $?" >&2

# The server runs the weights the bench measured fastest at its largest batch (WEIGHTS
# overrides: "none", "fp8 rowwise" or "fp8 tensorwise").
WEIGHTS=${WEIGHTS:-$("$PY" - "$OUT_DIR/gpu-engine.json" <<'EOF'
import json, sys
st = json.load(open(sys.argv[1])).get("steps", {})
names = {"bf16": "none rowwise", "fp8": "fp8 rowwise", "fp8t": "fp8 tensorwise"}
timed = {q: st[q]["graph"] for q in names if st.get(q, {}).get("graph")}
big = max(max(g, key=int) for g in timed.values()) if timed else None
print(names[min(timed, key=lambda q: timed[q][big]["step_ms"])] if timed else "none rowwise")
EOF
)}
read -r QUANT GEMM <<<"$WEIGHTS"
GEMM=${GEMM:-rowwise}
# SWITCH_INTERVAL (seconds): sys.setswitchinterval in the server process (a sitecustomize)
SERVER_PATH=$PYTHONPATH
if [[ -n "${SWITCH_INTERVAL:-}" ]]; then
  mkdir -p /tmp/orpheus-si
  echo "import sys; sys.setswitchinterval($SWITCH_INTERVAL)" > /tmp/orpheus-si/sitecustomize.py
  SERVER_PATH=/tmp/orpheus-si:$PYTHONPATH
fi

if [[ "${SERVE:-1}" == 1 && -f "$CKPT/config.json" ]]; then
  say "server: graph backend, weights $QUANT ($GEMM), $SLOTS slots, batch $BATCH, max_seq_len $SEQ, switch interval ${SWITCH_INTERVAL:-default}"
  PYTHONPATH=$SERVER_PATH "$PY" -m orpheus_svc.app.cli serve --model "$CKPT" --device "$DEVICE" --port "$PORT" \
    --backend graph --set model.quantization="$QUANT" --set model.fp8_gemm="$GEMM" \
    --set engine.max_sessions="$SLOTS" \
    --set engine.max_batch_size="$BATCH" --set engine.max_seq_len="$SEQ" \
    --set engine.max_waiting=1024 --set engine.row_budget=true \
    ${NULL_CODEC:+--set flusher.null_codec=true} \
    --set server.log_format=console >"$OUT_DIR/server.log" 2>&1 &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
  start=$(date +%s)
  until "$PY" -c "import sys; from orpheus_bench.runner import status
s = status('localhost:$PORT', timeout=1); sys.exit(0 if s and s.get('serving') else 1)" 2>/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null || (( $(date +%s) - start > ${START_TIMEOUT:-150} )); then
      tail -40 "$OUT_DIR/server.log" >&2; echo "server did not start" >&2; break
    fi
    sleep 1
  done
  echo "serving after $(( $(date +%s) - start )) s" >&2
  grep -a "captured\|kv cache" "$OUT_DIR/server.log" | tail -2 >&2
  say "orpheus-bench scaling $LEVELS (playout-paced)"
  timeout "${SERVE_TIMEOUT:-120}" "$PY" -m orpheus_bench.cli scaling --target "localhost:$PORT" \
    --concurrent "$LEVELS" --rounds 1 --warmup 2 --procs 4 --ramp "$RAMP" \
    --server-pid "$SERVER_PID" --no-raw \
    --label "graph backend, weights $QUANT $GEMM, CUDA graphs, Orpheus-3B shapes (random weights)" \
    --output "$OUT_DIR/serve.summary.json" 2>&1 | tail -12 | tee "$OUT_DIR/serve.txt"
  # the graph engine's step timings every 10 s (engine/graph/timing.py): device time per
  # step in the server against the bench's, and the device's idle time between steps; and
  # the engine's run-ahead record (engine/ahead.py: steps launched ahead, why not)
  grep -a "graph engine, last\|run-ahead:" "$OUT_DIR/server.log" > "$OUT_DIR/server-steps.txt" || true
  tail -60 "$OUT_DIR/server.log" > "$OUT_DIR/server-tail.log"
  rm -f "$OUT_DIR/server.log"
fi

say "summary"
"$PY" - "$OUT_DIR" "$QUANT $GEMM" <<'EOF'
import json, os, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text())
serve = out / "serve.summary.json"
if serve.is_file():
    summary["server"] = [
        {"sessions": r["concurrency"], "ttfb_p95_ms": round(r["ttfb_ms"]["p95"], 1),
         "sessions_underran": r["underruns"]["sessions_with_underrun"],
         "ok": r["succeeded"] == r["sessions"], "succeeded": r["succeeded"],
         "requests": r["sessions"], "slo_pass": r["slo"]["pass"],
         "weights": sys.argv[2], "null_codec": bool(os.environ.get("NULL_CODEC"))}
        for r in json.loads(serve.read_text())["runs"]]
steps = out / "server-steps.txt"
ahead = [line for line in steps.read_text().splitlines() if "run-ahead:" in line] \
    if steps.is_file() else []
if ahead:  # the last record of the whole run: "... in all {'steps': .., 'share': ..}"
    import ast, re
    record = ast.literal_eval(re.search(r"in all (\{.*\})", ahead[-1]).group(1))
    summary["ahead_share"] = record["share"]
    summary["ahead"] = record
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps(summary, indent=1))
EOF
