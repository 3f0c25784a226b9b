"""engine.backend = trtllm: Orpheus-3B on TensorRT-LLM 1.2.x (FP8 weights, 16-bit KV cache).

    build_trtllm_backend(config) -> (TrtllmBackend, encode)

loads the artifact that `orpheus-build-engine` wrote to engine.trtllm_engine_dir (its
orpheus_manifest.json says which kind):

    tensorrt-engine     tensorrt_llm._tensorrt_engine.LLM   (TensorRT backend, deprecated upstream)
    fp8-hf-checkpoint   tensorrt_llm.LLM                     (PyTorch backend, the default in 1.2)

Start-up checks run cheapest first and each names the missing piece: engine dir and
manifest; TensorRT-LLM's rules for the configured combination and installed version
(rules.plan_llm: features, runtime, limits, penalty, seed; all problems in one error,
before any GPU work); the tokenizer; the tensorrt_llm package, a CUDA GPU, and FP8
support (compute capability 8.9+); that TensorRT-LLM's worker process can import our
logits processor. tensorrt_llm is imported only inside these functions, so this module
imports on any machine.

Requests go in as prompt token ids (no tokenizer inside TensorRT-LLM, no detokenization)
with SamplingParams(end_id=128258, temperature, top_p, max_tokens, seed) and our logits
processor (processor.py): the repetition penalty, which TensorRT-LLM 1.2's default sampler
ignores (so repetition_penalty is never sent), and, unless engine.trtllm_grammar_mask is
false, the audio-grammar mask; the PyTorch backend's overlap scheduler is off (rules.py).
A client's seed is refused where TensorRT-LLM would ignore it (LlmPlan.seed_refusal).

Scheduler settings: the backend says it streams deltas (BackendCapabilities), and EngineLoop
derives the settings from that (engine/loop.py, effective_settings): every running generation
in every plan, no prefill-token budget (TensorRT-LLM chunks prefill itself), no horizon.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any, Callable

from orpheus_svc.core.step import StepRow
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, PAD_ID

from orpheus_svc.engine.registry import BuiltBackend
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor
from orpheus_svc.engine.trtllm.manifest import KV_DTYPE_BYTES, Manifest, kv_cache_bytes
from orpheus_svc.engine.trtllm.processor import RequestLogitsProcessor, request_processor
from orpheus_svc.engine.trtllm.rules import LlmPlan, plan_llm
from orpheus_svc.engine.trtllm.startup import (
    TrtllmStartupError,
    artifact_dir,
    find_tokenizer,
    installed_version,
    load_encoder,
    load_manifest,
    require_fp8_gpu,
    require_tensorrt_llm,
)
from orpheus_svc.engine.trtllm.worker import ensure_worker_can_import

log = logging.getLogger(__name__)


def sampling_kwargs(row: StepRow, grammar: AudioGrammarLogitsProcessor | None = None
                    ) -> dict[str, Any]:
    """SamplingParams keyword arguments for one generation (TensorRT-LLM 1.2 names).
    max_tokens is the request's, which the scheduler has already fitted to the slot
    (core.prompt.fit_to_slot). No repetition_penalty: the request's own logits processor
    applies it (processor.py); `grammar` is the shared mask, or None when it is off."""
    req = row.request
    s = req.sampling
    kw: dict[str, Any] = dict(end_id=END_OF_SPEECH_ID, pad_id=PAD_ID,
                              max_tokens=req.max_tokens, top_p=s.top_p, seed=row.seed,
                              detokenize=False)
    if s.temperature > 0:
        kw["temperature"] = s.temperature
    else:  # TensorRT-LLM wants temperature > 0; greedy is top_k = 1
        kw["top_k"] = 1
    kw["logits_processor"] = request_processor(len(req.prompt_ids), s.repetition_penalty,
                                               grammar)
    return kw


# -- the builder -------------------------------------------------------------------------

def build(config: Any, device: Any = None, dtype: Any = None) -> BuiltBackend:
    """engine/registry.py's entry: the backend, its tokenizer and its artifact directory
    (the model and device settings are the artifact's own)."""
    backend, encode = build_trtllm_backend(config)
    path = artifact_dir(config.engine)
    return BuiltBackend(backend, encode, str(config.engine.trtllm_engine_dir),
                        engine_dir=path,
                        tokenizer=str(find_tokenizer(path, config.model.path)))


# Why model.adapters is refused on this backend (docs/tensorrt-llm.md, "LoRA adapters").
ADAPTER_REFUSAL = (
    "the trtllm backend does not serve LoRA adapters: TensorRT-LLM's PyTorch backend has "
    "per-request LoRA (LoraConfig, LoRARequest), but this server does not pass adapters to "
    "it yet, and its combination with our FP8 artifact and per-request logits processor has "
    "not been verified (docs/tensorrt-llm.md); serve adapters with engine.backend graph or "
    "torch")


def refuse_adapters(config: Any) -> None:
    """TrtllmStartupError naming model.adapters / model.adapter_dirs / engine.max_adapters
    when one is set: an adapter voice must never be spoken silently by the base model."""
    from orpheus_svc.core.lora_config import adapter_dirs, adapter_sources

    if adapter_sources(config.model.adapters):
        raise TrtllmStartupError(f"model.adapters: {ADAPTER_REFUSAL}")
    if adapter_dirs(config.model.adapter_dirs):
        raise TrtllmStartupError(f"model.adapter_dirs: {ADAPTER_REFUSAL}")
    if config.engine.max_adapters:
        raise TrtllmStartupError(f"engine.max_adapters: {ADAPTER_REFUSAL}")


def build_trtllm_backend(config: Any) -> tuple[TrtllmBackend, Callable[[str], list[int]]]:
    """Load the artifact in engine.trtllm_engine_dir and return (backend, encode)."""
    e = config.engine
    refuse_adapters(config)
    path = artifact_dir(e)
    manifest = load_manifest(path)
    # TensorRT-LLM's rules for this configuration and version, before any GPU work
    plan = plan_llm(manifest, e, installed_version())
    encode = load_encoder(path, config.model.path)
    require_tensorrt_llm()
    gpu = require_fp8_gpu()
    grammar = AudioGrammarLogitsProcessor() if plan.grammar_mask else None
    # Before the LLM starts its worker: that process unpickles every request's processor.
    ensure_worker_can_import(RequestLogitsProcessor.__module__)
    for note in plan.notes:
        log.info("trtllm backend: %s", note)
    llm = _open_llm(plan, manifest, path, e)
    from tensorrt_llm import SamplingParams

    from orpheus_svc.engine.trtllm.stream import StreamBridge

    make_params = partial(_make_params, SamplingParams, grammar)
    backend = TrtllmBackend(StreamBridge(llm), make_params, num_slots=e.max_sessions,
                            max_seq_len=e.max_seq_len, on_close=llm.shutdown,
                            seed_refusal=plan.seed_refusal)
    _log_start(manifest, path, e, gpu, plan)
    return backend, encode


def _make_params(cls: Any, grammar: Any, row: StepRow) -> Any:
    return cls(**sampling_kwargs(row, grammar))


def _open_llm(plan: LlmPlan, manifest: Manifest, path: Path, e: Any) -> Any:
    from tensorrt_llm.llmapi import KvCacheConfig

    kv = KvCacheConfig(free_gpu_memory_fraction=e.trtllm_kv_free_gpu_fraction)
    try:
        if plan.runtime == "tensorrt":
            from tensorrt_llm._tensorrt_engine import LLM as EngineLLM
            return EngineLLM(model=str(path), kv_cache_config=kv, **plan.llm_kwargs)
        from tensorrt_llm import LLM
        return LLM(model=str(path), kv_cache_config=kv, **plan.llm_kwargs)
    except Exception as exc:
        raise TrtllmStartupError(
            f"TensorRT-LLM could not load {path} ({manifest.format}, built with "
            f"tensorrt_llm {manifest.versions.get('tensorrt_llm')}): "
            f"{exc.__class__.__name__}: {exc}") from exc


def _log_start(manifest: Manifest, path: Path, e: Any, gpu: Any, plan: LlmPlan) -> None:
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    spec = orpheus_3b_spec()
    kv_dtype = manifest.precision.get("kv_cache", "float16")
    need = kv_cache_bytes(slots=e.max_sessions, layers=spec.num_hidden_layers,
                          kv_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                          max_seq_len=e.max_seq_len, dtype_bytes=KV_DTYPE_BYTES.get(kv_dtype, 2))
    log.info("trtllm backend: %s from %s on %s (%s); %d slots x %d tokens need %.2f GiB of "
             "%s KV cache (pool: %.0f%% of free GPU memory); audio grammar %s; repetition "
             "penalty by our logits processor; per-request seeds %s; overlap scheduler %s",
             manifest.format, path, gpu.name, gpu.sm, e.max_sessions, e.max_seq_len,
             need / 2**30, kv_dtype, 100 * e.trtllm_kv_free_gpu_fraction,
             "masked by a logits processor and validated" if plan.grammar_mask
             else "validated only", "refused" if plan.seed_refusal else "honoured",
             "on" if plan.overlap_scheduler else "off")
