"""engine.backend = trtllm: Orpheus-3B on TensorRT-LLM 1.2.x (FP8 weights, 16-bit KV cache).

    build_trtllm_backend(config) -> (TrtllmBackend, encode)

loads the artifact that `orpheus-build-engine` wrote to engine.trtllm_engine_dir (its
orpheus_manifest.json says which kind):

    tensorrt-engine     tensorrt_llm._tensorrt_engine.LLM   (TensorRT backend, deprecated upstream)
    fp8-hf-checkpoint   tensorrt_llm.LLM                     (PyTorch backend, the default in 1.2)

Start-up checks run cheapest first and each names the missing piece: engine dir and
manifest, the engine's limits against the config, the tokenizer, then the tensorrt_llm
package, a CUDA GPU, and FP8 support (compute capability 8.9+). tensorrt_llm is imported
only inside these functions, so this module imports on any machine.

Requests go in as prompt token ids (no tokenizer inside TensorRT-LLM, no detokenization)
with SamplingParams(end_id=128258, temperature, top_p, repetition_penalty, max_tokens,
seed) and, unless engine.trtllm_grammar_mask is false, the audio-grammar logits processor.

Scheduler settings: run this backend with trtllm_scheduler_settings(config.engine), which
puts every running generation in every plan (max_batch_size >= max_sessions) and lifts the
prefill-token budget (TensorRT-LLM chunks prefill itself).
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial
from pathlib import Path
from typing import Any, Callable

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.scheduler import SchedulerSettings
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, PAD_ID

from .trtllm_backend import TrtllmBackend
from .trtllm_manifest import KV_DTYPE_BYTES, Manifest, kv_cache_bytes
from .trtllm_startup import (
    TrtllmStartupError,
    artifact_dir,
    check_limits,
    load_encoder,
    load_manifest,
    require_fp8_gpu,
    require_tensorrt_llm,
)

log = logging.getLogger(__name__)

__all__ = ["TrtllmBackend", "TrtllmStartupError", "build_trtllm_backend", "sampling_kwargs",
           "trtllm_scheduler_settings"]


def trtllm_scheduler_settings(engine: Any) -> SchedulerSettings:
    """Scheduler settings for this backend: every running generation in every plan (a
    generation left out cannot take its streamed tokens that step), and no prefill budget
    (TensorRT-LLM chunks prefill itself; a submitted generation stays "prefill" until its
    first token arrives and must not hold others back meanwhile)."""
    return dataclasses.replace(
        engine.scheduler_settings(),
        max_batch_size=max(engine.max_batch_size, engine.max_sessions),
        max_prefill_tokens=engine.max_sessions * engine.max_seq_len,
        max_ahead_s=0.0)  # no horizon either: TensorRT-LLM keeps every request running


def sampling_kwargs(gen: Generation, grammar: Any | None = None) -> dict[str, Any]:
    """SamplingParams keyword arguments for one generation (TensorRT-LLM 1.2 names)."""
    s = gen.request.sampling
    kw: dict[str, Any] = dict(end_id=END_OF_SPEECH_ID, pad_id=PAD_ID,
                              max_tokens=gen.request.max_tokens, top_p=s.top_p,
                              repetition_penalty=s.repetition_penalty, seed=gen.seed,
                              detokenize=False)
    if s.temperature > 0:
        kw["temperature"] = s.temperature
    else:  # TensorRT-LLM wants temperature > 0; greedy is top_k = 1
        kw["top_k"] = 1
    if grammar is not None:
        kw["logits_processor"] = grammar
    return kw


# -- the builder -------------------------------------------------------------------------

def build_trtllm_backend(config: Any) -> tuple[TrtllmBackend, Callable[[str], list[int]]]:
    """Load the artifact in engine.trtllm_engine_dir and return (backend, encode)."""
    e = config.engine
    path = artifact_dir(e)
    manifest = load_manifest(path)
    check_limits(manifest, e)
    encode = load_encoder(path, config.model.path)
    require_tensorrt_llm()
    gpu = require_fp8_gpu()
    if e.max_batch_size < e.max_sessions:
        log.warning("engine.max_batch_size %d < engine.max_sessions %d: use "
                    "trtllm_scheduler_settings() so every running generation is in every step",
                    e.max_batch_size, e.max_sessions)
    llm = _open_llm(manifest, path, e)
    grammar = None
    if e.trtllm_grammar_mask:
        from .trtllm_grammar import AudioGrammarLogitsProcessor
        grammar = AudioGrammarLogitsProcessor()
        _approve_for_ipc(type(grammar))
    from tensorrt_llm import SamplingParams

    from .trtllm_stream import StreamBridge

    make_params = partial(_make_params, SamplingParams, grammar)
    backend = TrtllmBackend(StreamBridge(llm), make_params, num_slots=e.max_sessions,
                            max_seq_len=e.max_seq_len, on_close=llm.shutdown)
    _log_start(manifest, path, e, gpu, grammar is not None)
    return backend, encode


def _make_params(cls: Any, grammar: Any, gen: Generation) -> Any:
    return cls(**sampling_kwargs(gen, grammar))


def _open_llm(manifest: Manifest, path: Path, e: Any) -> Any:
    from tensorrt_llm.llmapi import KvCacheConfig

    kv = KvCacheConfig(free_gpu_memory_fraction=e.trtllm_kv_free_gpu_fraction)
    try:
        if manifest.runtime == "tensorrt":
            from tensorrt_llm._tensorrt_engine import LLM as EngineLLM
            # Limits are compiled into the engine (checked against the config above).
            return EngineLLM(model=str(path), skip_tokenizer_init=True, kv_cache_config=kv)
        from tensorrt_llm import LLM
        return LLM(model=str(path), skip_tokenizer_init=True, kv_cache_config=kv,
                   max_batch_size=e.max_sessions, max_seq_len=e.max_seq_len,
                   max_num_tokens=manifest.limits.max_num_tokens)
    except Exception as exc:
        raise TrtllmStartupError(
            f"TensorRT-LLM could not load {path} ({manifest.format}, built with "
            f"tensorrt_llm {manifest.versions.get('tensorrt_llm')}): "
            f"{exc.__class__.__name__}: {exc}") from exc


def _approve_for_ipc(cls: type) -> None:
    """TensorRT-LLM unpickles SamplingParams in its worker with an allow-list of classes;
    register ours where this version offers a hook (names differ between releases)."""
    try:
        from tensorrt_llm import serialization
    except ImportError:
        return
    for hook in ("register_approved_ipc_class", "register_approved_class"):
        fn = getattr(serialization, hook, None)
        if fn is None:
            continue
        try:
            fn(cls)
        except Exception as exc:  # the mask is an extra; validation still guards the grammar
            log.warning("could not register %s with tensorrt_llm.serialization.%s: %s",
                        cls.__name__, hook, exc)
        return


def _log_start(manifest: Manifest, path: Path, e: Any, gpu: Any, masked: bool) -> None:
    from orpheus_svc.models.llama_config import orpheus_3b_spec

    spec = orpheus_3b_spec()
    kv_dtype = manifest.precision.get("kv_cache", "float16")
    need = kv_cache_bytes(slots=e.max_sessions, layers=spec.num_hidden_layers,
                          kv_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                          max_seq_len=e.max_seq_len, dtype_bytes=KV_DTYPE_BYTES.get(kv_dtype, 2))
    log.info("trtllm backend: %s from %s on %s (%s); %d slots x %d tokens need %.2f GiB of "
             "%s KV cache (pool: %.0f%% of free GPU memory); audio grammar %s",
             manifest.format, path, gpu.name, gpu.sm, e.max_sessions, e.max_seq_len,
             need / 2**30, kv_dtype, 100 * e.trtllm_kv_free_gpu_fraction,
             "masked by a logits processor and validated" if masked else "validated only")
