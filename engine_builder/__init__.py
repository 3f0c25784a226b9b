"""FP8 quantization and TensorRT-LLM artifacts for Orpheus-3B (`orpheus-build-engine`).

    plan.py           flags -> validated BuildPlan (refusals with reasons, memory figures)
    render.py         the plan as text (--dry-run)
    cli.py            the console script
    artifacts.py      output dir, model files, tokenizer copy, orpheus_manifest.json
    build_trt.py      --backend tensorrt: FP8 engine via the LLM API (deprecated upstream)
    build_pytorch.py  --backend pytorch: FP8 HF checkpoint via ModelOpt (default)
    calibration.py    Orpheus prompts + generated audio tokens for FP8 scales

Only build_trt / build_pytorch import GPU packages, and only when a build runs.
See docs/tensorrt-llm.md.
"""
