#!/usr/bin/env bash
# The torch backend and the SNAC codec on a real CUDA GPU, with no TensorRT-LLM and no
# weights from a hub: what scripts/gpu-smoke.sh cannot do where those are missing.
#
#   scripts/gpu-torch-check.sh OUT_DIR
#
# 1. bench/gpu_torch.py: CPU/GPU parity (SlotLlama logits, one whole offline synth), the
#    TensorRT-LLM grammar processor on CUDA logits, SNAC decode time, and the TorchBackend
#    decode step time per batch size at Orpheus-3B shapes (random bf16 weights).
# 2. A random-weight checkpoint of the Orpheus-3B shapes written in the HF layout (sharded,
#    as the real one is), served by the real server on CUDA (torch backend, random SNAC),
#    and `orpheus-bench scaling` against it at LEVELS (default 1,8,32).
#
# Writes OUT_DIR/gpu-torch.json, OUT_DIR/serve.summary.json, OUT_DIR/serve.txt and the tail of
# the server log. PYTHON (python3) must have torch with CUDA and the server's dependencies;
# the repository's packages are used from the checkout (PYTHONPATH), not installed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: gpu-torch-check.sh OUT_DIR}
PY=${PYTHON:-python3}
PORT=${PORT:-50071}
LEVELS=${LEVELS:-1,8,32}
SLOTS=${SLOTS:-64}
CKPT=${CKPT:-/tmp/orpheus-3b-random}
DEVICE=${DEVICE:-cuda}  # cpu: the dry run of this script (TINY=1 too)
TINY=${TINY:+--tiny}
mkdir -p "$OUT_DIR"
export PYTHONPATH=$PWD:$PWD/bench:$PWD/clients/python/src${PYTHONPATH:+:$PYTHONPATH}
export ORPHEUS_SVC_CACHE=${ORPHEUS_SVC_CACHE:-/tmp/orpheus-cache}
say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)" >&2; }

say "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, grpc, google.protobuf as pb; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), "| grpcio", grpc.__version__, "| protobuf", pb.__version__)'

say "checks and timings (bench/gpu_torch.py)"
timeout 240 "$PY" bench/gpu_torch.py --device "$DEVICE" $TINY ${GPU_TORCH_ARGS:-} --output "$OUT_DIR/gpu-torch.json" >/dev/null

say "random Orpheus-3B checkpoint -> $CKPT"
rm -rf "$CKPT"
timeout 120 "$PY" bench/gpu_torch.py --device "$DEVICE" $TINY --write-checkpoint "$CKPT" >/dev/null || exit 1

say "server (torch backend on CUDA, $SLOTS slots)"
"$PY" -m orpheus_svc.app.cli serve --model "$CKPT" --device "$DEVICE" --port "$PORT" \
  --set engine.max_sessions="$SLOTS" --set engine.max_batch_size="$SLOTS" \
  --set engine.max_seq_len=2048 >"$OUT_DIR/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null' EXIT
start=$(date +%s)
until "$PY" -c "import sys; from orpheus_bench.runner import status
s = status('localhost:$PORT', timeout=1); sys.exit(0 if s and s.get('serving') else 1)" 2>/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null || (( $(date +%s) - start > 180 )); then
    tail -40 "$OUT_DIR/server.log" >&2; echo "server did not start" >&2; exit 1
  fi
  sleep 1
done
echo "serving after $(( $(date +%s) - start )) s" >&2

say "orpheus-bench scaling $LEVELS"
timeout "${BENCH_TIMEOUT:-150}" "$PY" -m orpheus_bench.cli scaling --target "localhost:$PORT" --concurrent "$LEVELS" \
  --rounds 1 --warmup 1 --server-pid "$SERVER_PID" --no-raw \
  --label "torch backend, CUDA, Orpheus-3B shapes (random weights)" \
  --output "$OUT_DIR/serve.summary.json" 2>&1 | tail -30 | tee "$OUT_DIR/serve.txt"
tail -60 "$OUT_DIR/server.log" > "$OUT_DIR/server-tail.log"
rm -f "$OUT_DIR/server.log"
