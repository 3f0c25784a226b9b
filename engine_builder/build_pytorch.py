"""--backend pytorch: an FP8 Hugging Face checkpoint for TensorRT-LLM's PyTorch backend.

    model = AutoModelForCausalLM.from_pretrained(<hf dir>, dtype <kv dtype>, on the GPU)
    mtq.quantize(model, mtq.FP8_DEFAULT_CFG, forward_loop)    # ModelOpt: FP8 e4m3 per-tensor
                                                              # weights + activations of the
                                                              # decoder linears; lm_head off
    export_hf_checkpoint(model, dtype=<kv dtype>, export_dir=<out>)

The KV cache is not quantized (no FP8_KV config is merged), so TensorRT-LLM keeps it in
the model dtype: float16 by default. tensorrt_llm.LLM(model=<out>) loads the result
directly (hf_quant_config.json tells it the weights are FP8). Calibration: calibration.py.
Never run in CI: it needs a GPU with FP8 (sm89+), transformers and nvidia-modelopt.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .plan import BuildPlan

log = logging.getLogger(__name__)


def build_checkpoint(plan: BuildPlan, model_dir: Path) -> dict[str, Any]:
    """Quantize and export into plan.out; returns what the manifest should record."""
    import modelopt
    import modelopt.torch.quantization as mtq
    import torch
    import transformers
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM

    from orpheus_svc.models.tokenizer import TextTokenizer

    from . import calibration

    dtype = getattr(torch, plan.kv_cache_dtype)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=dtype,
                                                 device_map="cuda")
    model.eval()
    encode = TextTokenizer.from_file(model_dir).encode
    data = list(calibration.samples(model, encode, plan.calib_size))
    log.info("calibrating FP8 scales on %d Orpheus samples", plan.calib_size)

    def forward_loop(m: Any) -> None:
        with torch.no_grad():
            for ids, mask in data:
                m(input_ids=ids, attention_mask=mask)

    model = mtq.quantize(model, mtq.FP8_DEFAULT_CFG, forward_loop)
    with torch.inference_mode():
        export_hf_checkpoint(model, dtype=dtype, export_dir=str(plan.out))
    return {"versions": {"modelopt": str(modelopt.__version__),
                         "transformers": str(transformers.__version__)},
            "calibration": {"samples": plan.calib_size,
                            "source": "Orpheus prompts x voices + generated audio tokens"}}
