"""orpheus-build-engine: FP8 Orpheus for TensorRT-LLM 1.2.x, plus its manifest.

    orpheus-build-engine --model DIR_OR_ID --out DIR [--backend pytorch|tensorrt]
        [--max-batch-size 32] [--max-seq-len 4096] [--max-num-tokens N]
        [--kv-cache-dtype fp16] [--quantization fp8] [--calib-size 512]
        [--calib-dataset NAME_OR_DIR] [--force] [--dry-run]

--dry-run prints the plan (limits, precision, KV-cache memory, GPU readiness) without
importing tensorrt_llm. Exit codes: 0 done (or plan printed), 2 refused flags,
3 this machine cannot build (no FP8 GPU, missing package, output dir in use), 1 the
build itself failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Callable

from orpheus_svc.engine.trtllm.gpu import GpuInfo, fp8_problem, probe_gpu

from .artifacts import BuildEnvironmentError, run_build
from .plan import BACKENDS, BuildRequest, PlanError, make_plan
from .render import render_plan


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orpheus-build-engine",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Orpheus checkpoint: local HF dir or hub id")
    p.add_argument("--out", required=True, help="output directory (engine or FP8 checkpoint)")
    p.add_argument("--backend", default="pytorch", choices=BACKENDS,
                   help="pytorch: FP8 HF checkpoint (ModelOpt) for TensorRT-LLM's PyTorch "
                        "backend (default); tensorrt: compiled engine (deprecated upstream)")
    p.add_argument("--max-batch-size", type=int, default=32, help="slots (concurrent generations)")
    p.add_argument("--max-seq-len", type=int, default=4096, help="prompt + audio tokens per slot")
    p.add_argument("--max-num-tokens", type=int, default=None,
                   help="tokens per engine iteration (default 8192)")
    p.add_argument("--kv-cache-dtype", default="fp16", help="fp16 (default) or bf16")
    p.add_argument("--quantization", default="fp8",
                   help="fp8 only; INT4/INT8 variants are refused (prosody flattening)")
    p.add_argument("--calib-size", type=int, default=512, help="FP8 calibration samples")
    p.add_argument("--calib-dataset", default=None,
                   help="tensorrt backend only: dataset name or local dir for calibration")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    p.add_argument("--dry-run", action="store_true", help="print the plan; build nothing")
    return p


def main(argv: list[str] | None = None, *,
         gpu_probe: Callable[[], GpuInfo | None] = probe_gpu) -> int:
    args = build_parser().parse_args(argv)
    req = BuildRequest(model=args.model, out=args.out, backend=args.backend,
                       max_batch_size=args.max_batch_size, max_seq_len=args.max_seq_len,
                       max_num_tokens=args.max_num_tokens, kv_cache_dtype=args.kv_cache_dtype,
                       quantization=args.quantization, calib_size=args.calib_size,
                       calib_dataset=args.calib_dataset)
    try:
        plan = make_plan(req)
    except PlanError as exc:
        for reason in exc.reasons:
            print(f"orpheus-build-engine: refused: {reason}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # unreadable config.json
        print(f"orpheus-build-engine: {exc}", file=sys.stderr)
        return 2
    gpu = gpu_probe()
    print(render_plan(plan, gpu, dry_run=args.dry_run))
    if args.dry_run:
        return 0
    problem = fp8_problem(gpu)
    if problem is not None:
        print(f"orpheus-build-engine: cannot build here: {problem}", file=sys.stderr)
        return 3
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    t0 = time.monotonic()
    try:
        manifest_path = run_build(plan, gpu, force=args.force)
    except BuildEnvironmentError as exc:
        print(f"orpheus-build-engine: cannot build here: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # the build itself: report, do not hide the traceback cause
        logging.getLogger(__name__).exception("build failed")
        print(f"orpheus-build-engine: build failed: {exc.__class__.__name__}: {exc}",
              file=sys.stderr)
        return 1
    print(f"built {plan.format} in {time.monotonic() - t0:.0f} s: {plan.out} "
          f"(manifest {manifest_path})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
