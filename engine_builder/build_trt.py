"""--backend tensorrt: an FP8 TensorRT engine through the TensorRT-LLM 1.2 LLM API.

    LLM(model=<hf dir>, dtype=<kv dtype>, quant_config=QuantConfig(quant_algo=FP8),
        calib_config=CalibConfig(...), build_config=BuildConfig(<limits>)).save(<out>)

No kv_cache_quant_algo is set, so the KV cache stays in the model dtype (float16 by
default: the FP16 KV of the precision strategy). Calibration runs TensorRT-LLM's own
text dataset (or --calib-dataset); see docs/tensorrt-llm.md for why the pytorch path,
which calibrates on Orpheus audio tokens, is preferred. Never run in CI: it needs a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .plan import BuildPlan


def build_engine(plan: BuildPlan, model_dir: Path) -> dict[str, Any]:
    """Build and save the engine into plan.out; returns what the manifest should record."""
    import tensorrt_llm
    from tensorrt_llm._tensorrt_engine import LLM
    from tensorrt_llm.llmapi import BuildConfig, CalibConfig, QuantAlgo, QuantConfig

    calib_kwargs: dict[str, Any] = {"calib_batches": plan.calib_size}
    if plan.calib_dataset:
        calib_kwargs["calib_dataset"] = plan.calib_dataset
    build_config = BuildConfig(max_batch_size=plan.max_batch_size, max_seq_len=plan.max_seq_len,
                               max_num_tokens=plan.max_num_tokens, max_beam_width=1)
    llm = LLM(model=str(model_dir), dtype=plan.kv_cache_dtype,
              quant_config=QuantConfig(quant_algo=QuantAlgo.FP8),
              calib_config=CalibConfig(**calib_kwargs), build_config=build_config)
    try:
        llm.save(str(plan.out))
    finally:
        llm.shutdown()
    return {"versions": {"tensorrt_llm": str(tensorrt_llm.__version__)},
            "calibration": {"samples": plan.calib_size,
                            "source": plan.calib_dataset or "TensorRT-LLM default (text)"}}
