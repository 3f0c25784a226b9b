"""Human-readable text of a build plan (the --dry-run output)."""

from __future__ import annotations

from orpheus_svc.engine.trtllm.gpu import GpuInfo, fp8_problem
from orpheus_svc.engine.trtllm.manifest import MANIFEST_NAME

from .plan import BuildPlan

_WHAT = {
    "tensorrt": "TensorRT engine via tensorrt_llm._tensorrt_engine.LLM "
                "(QuantConfig FP8, CalibConfig, BuildConfig, llm.save)",
    "pytorch": "FP8 HF checkpoint for TensorRT-LLM's PyTorch backend "
               "(ModelOpt mtq.quantize FP8_DEFAULT_CFG + export_hf_checkpoint)",
}


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB ({n / 2**30:.2f} GiB)"


def render_plan(plan: BuildPlan, gpu: GpuInfo | None, *, dry_run: bool = True) -> str:
    s = plan.spec
    kv = plan.kv_cache_bytes()
    problem = fp8_problem(gpu)
    gpu_line = (f"{gpu.name} ({gpu.sm}): FP8 ok" if gpu is not None and problem is None
                else f"NOT READY: {problem}")
    calib = f"{plan.calib_size} samples"
    if plan.backend == "tensorrt":
        calib += f" of {plan.calib_dataset or 'TensorRT-LLM default dataset (text)'}"
    else:
        calib += " (Orpheus prompts x voices + generated audio tokens)"
    lines = [
        "orpheus-build-engine plan" + (" (dry run: tensorrt_llm not imported, nothing built)"
                                       if dry_run else ""),
        f"  model          {plan.model}",
        f"  shapes from    {plan.spec_source}",
        f"  backend        {plan.backend}: {_WHAT[plan.backend]}",
        f"  output         {plan.out}/ (+ {MANIFEST_NAME}, tokenizer files)",
        f"  precision      weights fp8 (e4m3), activations fp8, KV cache {plan.kv_cache_dtype}",
        f"  limits         max_batch_size {plan.max_batch_size}, max_seq_len {plan.max_seq_len}, "
        f"max_num_tokens {plan.max_num_tokens}",
        f"  calibration    {calib}",
        f"  KV cache       {plan.max_batch_size} slots x {s.num_hidden_layers} layers x 2 x "
        f"{s.num_key_value_heads} kv heads x {s.head_dim} dim x {plan.max_seq_len} tokens x "
        f"{plan.kv_dtype_bytes} bytes = {kv:,} bytes = {_gb(kv)}",
        f"  weights        ~{_gb(plan.weight_bytes())} "
        f"(decoder linears fp8, embedding/head 16-bit)",
        f"  gpu            {gpu_line}",
    ]
    lines += [f"  note           {n}" for n in plan.notes]
    return "\n".join(lines)
