#!/usr/bin/env bash
# GPU smoke test of the trtllm backend, on each of TensorRT-LLM's two backends (its PyTorch
# backend with our FP8 checkpoint, its TensorRT backend with an FP8 engine): build the
# artifact, serve it, prove the audio grammar holds over a few hundred tokens per call
# (engine_builder.grammar_smoke: GetStatus.grammar_violations must not grow), then run the
# scaling benchmark. Exits non-zero when any backend fails its grammar check.
#
# NOT run in CI and never run by the authors so far: it needs an NVIDIA GPU of compute
# capability 8.9+ (RTX 4090, L4, L40S, H100, H200), TensorRT-LLM 1.2.x, the Orpheus weights
# (local dir or hub access) and, for --backend pytorch builds, nvidia-modelopt + transformers.
#
#   scripts/gpu-smoke.sh                      # defaults below; every one can be overridden
#   MODEL=/models/orpheus-3b BUILD_BACKENDS=tensorrt LEVELS=1,16,32 scripts/gpu-smoke.sh
#
# Environment (defaults):
#   MODEL=canopylabs/orpheus-3b-0.1-ft   SNAC=hubertsiuzdak/snac_24khz
#   BUILD_BACKENDS="pytorch tensorrt"    OUT_PREFIX=engines/orpheus-fp8-  REBUILD=0
#   SLOTS=32  SEQ=4096  KV_FRAC=0.9  PORT=50071  LEVELS=1,8,16,32  ROUNDS=2
#   GRAMMAR_CALLS=8  GRAMMAR_MIN_TOKENS=300   (GRAMMAR_CALLS=0 skips the grammar check)
#   RESULTS_PREFIX=bench/results/gpu-smoke-<time>  PYTHON=python
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-canopylabs/orpheus-3b-0.1-ft}
SNAC=${SNAC:-hubertsiuzdak/snac_24khz}
BUILD_BACKENDS=${BUILD_BACKENDS:-${BUILD_BACKEND:-pytorch tensorrt}}
OUT_PREFIX=${OUT_PREFIX:-engines/orpheus-fp8-}
REBUILD=${REBUILD:-0}
SLOTS=${SLOTS:-32}
SEQ=${SEQ:-4096}
KV_FRAC=${KV_FRAC:-0.9}
PORT=${PORT:-50071}
LEVELS=${LEVELS:-1,8,16,32}
ROUNDS=${ROUNDS:-2}
GRAMMAR_CALLS=${GRAMMAR_CALLS:-8}
GRAMMAR_MIN_TOKENS=${GRAMMAR_MIN_TOKENS:-300}
RESULTS_PREFIX=${RESULTS_PREFIX:-bench/results/gpu-smoke-$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python}

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'gpu-smoke: %s\n' "$*" >&2; exit 1; }

say "environment"
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs an NVIDIA GPU"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
"$PY" -c 'import tensorrt_llm, torch; print("tensorrt_llm", tensorrt_llm.__version__, "| torch", torch.__version__, "cuda", torch.version.cuda)' \
  || die "tensorrt_llm does not import (pip install 'tensorrt-llm~=1.2.0' or use the NGC image)"

stop_server() {
  if [[ -n "${SERVER_PID:-}" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}

FAILED=()
for BUILD_BACKEND in $BUILD_BACKENDS; do
OUT=${OUT_PREFIX}${BUILD_BACKEND}
RESULTS=${RESULTS_PREFIX}-${BUILD_BACKEND}.summary.json
LOG=${RESULTS%.json}.server.log

say "engine ($BUILD_BACKEND) -> $OUT"
"$PY" -m engine_builder.cli --model "$MODEL" --out "$OUT" --backend "$BUILD_BACKEND" \
  --max-batch-size "$SLOTS" --max-seq-len "$SEQ" --dry-run
if [[ "$REBUILD" == "1" || ! -f "$OUT/orpheus_manifest.json" ]]; then
  "$PY" -m engine_builder.cli --model "$MODEL" --out "$OUT" --backend "$BUILD_BACKEND" \
    --max-batch-size "$SLOTS" --max-seq-len "$SEQ" --force
else
  echo "reusing $OUT (REBUILD=1 to rebuild)" >&2
fi
cat "$OUT/orpheus_manifest.json"

say "server on :$PORT (log: $LOG)"
mkdir -p "$(dirname "$RESULTS")"
"$PY" -m orpheus_svc.app.cli serve --backend trtllm --model "$MODEL" --snac "$SNAC" \
  --port "$PORT" --set engine.trtllm_engine_dir="$OUT" --set engine.max_sessions="$SLOTS" \
  --set engine.max_batch_size="$SLOTS" --set engine.max_seq_len="$SEQ" \
  --set engine.trtllm_kv_free_gpu_fraction="$KV_FRAC" >"$LOG" 2>&1 &
SERVER_PID=$!
trap stop_server EXIT

# Loading the model and warming up can take minutes on first start.
PYTHONPATH=bench "$PY" - "$PORT" "$SERVER_PID" <<'EOF' || { tail -50 "$LOG" >&2; die "server did not become ready"; }
import os, sys, time
from orpheus_bench.runner import status
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 900
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("server exited during start-up")
    info = status(f"localhost:{port}", timeout=2.0)
    if info and info.get("serving"):
        print(f"serving: backend {info.get('backend')}, model {info.get('model')}, "
              f"{info.get('total_slots')} slots", file=sys.stderr)
        sys.exit(0)
    time.sleep(2)
sys.exit("not serving after 15 minutes")
EOF

# The backend logs its TensorRT-LLM plan: overlap scheduler off while the grammar mask is on.
grep -E "overlap scheduler" "$LOG" >&2 || true

say "grammar ($BUILD_BACKEND): $GRAMMAR_CALLS calls of >= $GRAMMAR_MIN_TOKENS tokens each"
if [[ "$GRAMMAR_CALLS" -gt 0 ]] && ! "$PY" -m engine_builder.grammar_smoke \
    --target "localhost:$PORT" --requests "$GRAMMAR_CALLS" --min-tokens "$GRAMMAR_MIN_TOKENS"; then
  FAILED+=("$BUILD_BACKEND: the audio grammar did not hold (see above)")
fi

say "benchmark: scaling $LEVELS"
PYTHONPATH=bench "$PY" -m orpheus_bench.cli scaling --target "localhost:$PORT" \
  --concurrent "$LEVELS" --rounds "$ROUNDS" --server-pid "$SERVER_PID" \
  --label "gpu-smoke $BUILD_BACKEND fp8" --output "$RESULTS"

say "summary ($RESULTS)"
PYTHONPATH=bench "$PY" - "$RESULTS" "$PORT" <<'EOF'
import json, sys
from orpheus_bench.runner import status
doc = json.load(open(sys.argv[1]))
print(f"{'conc':>5} {'ok%':>5} {'TTFB p50 ms':>12} {'p95':>7} {'tok/s':>8} {'audio s/s':>10} {'underruns':>10}")
for r in doc["runs"]:
    if r.get("label") == "warm-up":
        continue
    ok = 100 * (r.get("success_rate") or 0)
    tps = (r.get("server") or {}).get("tokens_per_s") or r.get("tokens_per_s") or 0
    print(f"{r['concurrency']:>5} {ok:>5.0f} {r['ttfb_ms']['p50'] or 0:>12.0f} "
          f"{r['ttfb_ms']['p95'] or 0:>7.0f} {tps:>8.0f} {r.get('audio_s_per_wall_s') or 0:>10.1f} "
          f"{r['underruns']['events_total']:>10}")
info = status(f"localhost:{sys.argv[2]}") or {}
print(f"grammar_violations: {info.get('grammar_violations')} (expected 0 with the logits mask)")
EOF
stop_server
trap - EXIT
done

if (( ${#FAILED[@]} )); then
  printf 'gpu-smoke: FAILED: %s\n' "${FAILED[@]}" >&2
  exit 1
fi
echo "gpu-smoke: the audio grammar held on every backend ($BUILD_BACKENDS)" >&2
