#!/usr/bin/env bash
# The graph engine on a real GPU, in one run of at most ~5 minutes (issue 28; BENCHMARKS.md,
# "The graph engine"):
#
#   scripts/gpu-engine-check.sh OUT_DIR                 # on a CUDA machine (H100 / H200)
#   DEVICE=cpu TINY=1 scripts/gpu-engine-check.sh DIR   # the dry run (tests/bench runs it)
#   WHEELS=.whl scripts/gpu-engine-check.sh OUT_DIR     # on a card whose image lacks the
#                                                       # server's packages: the wheels that
#                                                       # scripts/gpu-wheels.sh makes here
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
# The bench writes the checkpoint first and both JSON files after every section, so a
# section that fails or runs past BENCH_TIMEOUT leaves the others' figures and step 2 still
# runs (on bf16 weights if the steps section did not finish).
# summary.json holds every field of the acceptance (issue 45 item 5; bench/gpu_engine.py
# ACCEPTANCE), null with its reason in "missing" where it was not measured:
# server_step_ratio (the server's step period at 128 sessions, else the largest level, over
# the bench's graph device time at the batch nearest the server's mean batch: server_step),
# snac_gpu_share (1 - the null-codec pass's step period / the codec pass's, same level:
# snac_step), ahead_share and ahead (the server's run-ahead record, engine/ahead.py),
# graph_nodes, parity (teacher-forced top-1 agreement, max |logit diff|), step_ms /
# device_ms and their seeded twins, seeded_row_identical.
# SNAC_GPU=1 also runs bench/snac_gpu.py after step 1 (SNAC's CUDA graphs, bf16 and fused
# Snake against the eager float32 codec: snac-gpu.json; about 1-2 minutes, so not in the
# first run's five). SNAC_SHARE=1 runs step 2 twice, with the codec and then with flusher.null_codec (silence,
# no SNAC: serve-null.summary.json, server-steps-null.txt), for snac_gpu_share; NULL_CODEC=1
# runs the one pass with the null codec only (the server's rows say which: null_codec).
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
if [[ -n "${WHEELS:-}" ]]; then  # scripts/gpu-wheels.sh's folder, installed beside the image's
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/orpheus-site "$WHEELS"/*.whl || { echo "cannot install $WHEELS" >&2; exit 3; }
  export PYTHONPATH=/tmp/orpheus-site:$PYTHONPATH
fi
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
if [[ -n "${SNAC_GPU:-}" ]]; then
  say "bench/snac_gpu.py"
  timeout "${SNAC_TIMEOUT:-150}" "$PY" bench/snac_gpu.py --device "$DEVICE" ${TINY:+--quick} \
    --output "$OUT_DIR/snac-gpu.json" >/dev/null
  echo "snac_gpu exit $?" >&2
fi

# The server runs the weights the bench measured fastest at its largest batch (WEIGHTS
# overrides: "none", "fp8 rowwise" or "fp8 tensorwise").
WEIGHTS=${WEIGHTS:-$("$PY" - "$OUT_DIR/gpu-engine.json" <<'EOF'
import json, sys
names = {"bf16": "none rowwise", "fp8": "fp8 rowwise", "fp8t": "fp8 tensorwise"}
try:  # bf16 when the steps section did not finish
    st = json.load(open(sys.argv[1])).get("steps", {})
    timed = {q: st[q]["graph"] for q in names if st.get(q, {}).get("graph")}
    big = max((max(g, key=int) for g in timed.values()), key=int)
    print(names[min(timed, key=lambda q: timed[q][big]["step_ms"])])
except Exception:
    print("none rowwise")
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

# serve NULL SUFFIX: the server on the checkpoint (NULL=1: flusher.null_codec) under
# orpheus-bench; writes serve$SUFFIX.summary.json, serve$SUFFIX.txt, server-steps$SUFFIX.txt
# and server-tail$SUFFIX.log
serve() {
  local null=$1 sfx=$2
  say "server${null:+ (null codec)}: graph backend, weights $QUANT ($GEMM), $SLOTS slots, batch $BATCH, max_seq_len $SEQ, switch interval ${SWITCH_INTERVAL:-default}"
  PYTHONPATH=$SERVER_PATH "$PY" -m orpheus_svc.app.cli serve --model "$CKPT" --device "$DEVICE" --port "$PORT" \
    --backend graph --set model.quantization="$QUANT" --set model.fp8_gemm="$GEMM" \
    --set engine.max_sessions="$SLOTS" \
    --set engine.max_batch_size="$BATCH" --set engine.max_seq_len="$SEQ" \
    --set engine.max_waiting=1024 --set engine.row_budget=true \
    ${null:+--set flusher.null_codec=true} \
    --set server.log_format=console >"$OUT_DIR/server.log" 2>&1 &
  SERVER_PID=$!
  trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
  local start
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
    --label "graph backend, weights $QUANT $GEMM, CUDA graphs, Orpheus-3B shapes (random weights)${null:+, null codec}" \
    --output "$OUT_DIR/serve$sfx.summary.json" 2>&1 | tail -12 | tee "$OUT_DIR/serve$sfx.txt"
  # the graph engine's step timings every 10 s (engine/graph/timing.py): device time per
  # step in the server against the bench's, and the device's idle time between steps; and
  # the engine's run-ahead record (engine/ahead.py: steps launched ahead, why not)
  grep -a "graph engine, last\|run-ahead:" "$OUT_DIR/server.log" > "$OUT_DIR/server-steps$sfx.txt" || true
  tail -60 "$OUT_DIR/server.log" > "$OUT_DIR/server-tail$sfx.log"
  rm -f "$OUT_DIR/server.log"
  kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null
  trap - EXIT
}

if [[ "${SERVE:-1}" == 1 && -f "$CKPT/config.json" ]]; then
  serve "${NULL_CODEC:-}" ""
  # SNAC's share of the step: the same levels again with the null codec (SNAC_SHARE=1)
  if [[ -n "${SNAC_SHARE:-}" && -z "${NULL_CODEC:-}" ]]; then serve 1 -null; fi
elif [[ "${SERVE:-1}" == 1 ]]; then
  echo "no checkpoint at $CKPT: the server part is skipped" >&2
fi

say "summary"
"$PY" - "$OUT_DIR" "$QUANT $GEMM" <<'EOF'
import json, os, sys
from gpu_engine import finish  # bench/gpu_engine.py: every acceptance field, null if unmeasured
print(json.dumps(finish(sys.argv[1], sys.argv[2], bool(os.environ.get("NULL_CODEC"))), indent=1))
EOF
