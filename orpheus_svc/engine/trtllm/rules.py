"""TensorRT-LLM's own rules that the trtllm backend relies on, checked once at start-up.

    plan_llm(manifest, engine) -> LlmPlan      (or TrtllmStartupError naming every problem)

runs before tensorrt_llm is imported and before any GPU is touched. Each rule is
TensorRT-LLM 1.2's, read from its source (file paths in docs/tensorrt-llm.md):

  features  A logits post-processor (our audio-grammar mask) and the PyTorch backend's
            overlap scheduler do not combine: the executor applies the processors inside
            the forward step to request.get_tokens(), and with the overlap scheduler the
            previous step's token is added only after that forward step. The mask would
            read the token before last and forbid the right frame position. So the
            overlap scheduler is off whenever the mask is on ("auto"), and asking for
            both ("on") is refused.
  backend   The TensorRT engine runtime (tensorrt_llm._tensorrt_engine.LLM) has no
            disable_overlap_scheduler argument (it rejects it), so "on" is refused there
            and the argument is never passed to it.
  limits    Chunked prefill stays off (our admission relies on it). Without it the
            TensorRT runtime refuses prompt + max_tokens > the engine's max_seq_len (the
            per-request clamp, core.prompt.fit_to_slot, keeps every request inside), and
            the PyTorch runtime refuses a prompt longer than max_num_tokens, so the
            longest prompt our admission lets through must fit max_num_tokens. A TensorRT
            engine is compiled for its batch size and context; the config must fit them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orpheus_svc.core.tokens import FRAME_TOKENS

from orpheus_svc.engine.trtllm.manifest import FORMAT_ENGINE, Manifest
from orpheus_svc.engine.trtllm.startup import TrtllmStartupError

_ON = ("on", "true")
_OFF = ("off", "false")


@dataclass(frozen=True)
class LlmPlan:
    """What the backend asks TensorRT-LLM for, decided before anything is loaded."""

    runtime: str                 # "pytorch" (tensorrt_llm.LLM) | "tensorrt" (_tensorrt_engine.LLM)
    grammar_mask: bool           # the audio-grammar logits processor goes with every request
    overlap_scheduler: bool      # the PyTorch backend's overlap scheduler
    llm_kwargs: dict[str, Any]   # LLM(...) keyword arguments besides model and kv_cache_config
    notes: list[str] = field(default_factory=list)  # decisions to log at start-up, with why


def plan_llm(manifest: Manifest, engine: Any) -> LlmPlan:
    """Check the configured combination against TensorRT-LLM's rules (module docstring);
    raise TrtllmStartupError listing every violation, each naming its settings."""
    runtime = manifest.runtime
    mask = bool(engine.trtllm_grammar_mask)
    wanted = str(engine.trtllm_overlap_scheduler).strip().lower()
    problems: list[str] = []
    notes: list[str] = []

    # -- features: logits post-processor x overlap scheduler -------------------------------
    if runtime == "pytorch":
        if wanted in _ON and mask:
            problems.append(
                "engine.trtllm_grammar_mask is true and engine.trtllm_overlap_scheduler is "
                "on: TensorRT-LLM applies a logits processor to the tokens of the step "
                "before last under its overlap scheduler, so the audio-grammar mask would "
                "forbid the right frame position (every session would fail after 2 tokens). "
                "Set engine.trtllm_overlap_scheduler to auto or off, or switch the mask off "
                "(tokens are still validated)")
        overlap = wanted in _ON or (wanted not in _OFF and not mask)
        if mask and not overlap:
            notes.append("overlap scheduler disabled (disable_overlap_scheduler=True): the "
                         "audio-grammar logits processor needs each request's previous "
                         "token, which TensorRT-LLM adds only after the next forward step "
                         "when the overlap scheduler is on")
    else:
        overlap = False
        if wanted in _ON:
            problems.append(
                f"engine.trtllm_overlap_scheduler is on, but {engine.trtllm_engine_dir} is a "
                f"TensorRT engine ({manifest.format}): its runtime "
                f"(tensorrt_llm._tensorrt_engine.LLM) has no overlap scheduler setting. Set "
                f"it to auto or off, or build the pytorch artifact")

    # -- limits ----------------------------------------------------------------------------
    lim = manifest.limits
    longest_prompt = engine.max_seq_len - FRAME_TOKENS - 1  # what admission lets through
    if manifest.format == FORMAT_ENGINE:
        built_for = []
        if engine.max_sessions > lim.max_batch_size:
            built_for.append(f"engine.max_sessions {engine.max_sessions} > the engine's "
                             f"max_batch_size {lim.max_batch_size}")
        if engine.max_seq_len > lim.max_seq_len:
            built_for.append(f"engine.max_seq_len {engine.max_seq_len} > the engine's "
                             f"max_seq_len {lim.max_seq_len}")
        if built_for:
            problems.extend(built_for)
            problems.append(f"lower the config or rebuild with orpheus-build-engine "
                            f"--max-batch-size {engine.max_sessions} --max-seq-len "
                            f"{engine.max_seq_len}")
    elif lim.max_num_tokens < longest_prompt:
        problems.append(
            f"engine.max_seq_len {engine.max_seq_len} admits prompts of up to "
            f"{longest_prompt} tokens, but the artifact's max_num_tokens is "
            f"{lim.max_num_tokens}: without chunked prefill TensorRT-LLM refuses a longer "
            f"prompt. Lower engine.max_seq_len or rebuild with --max-num-tokens "
            f">= {longest_prompt}")
    if lim.max_num_tokens < engine.max_sessions:
        problems.append(f"the artifact's max_num_tokens {lim.max_num_tokens} < "
                        f"engine.max_sessions {engine.max_sessions}: one iteration cannot "
                        f"hold a decode token of every slot")

    if problems:
        raise TrtllmStartupError(
            f"engine.backend trtllm ({manifest.format} in {engine.trtllm_engine_dir}) "
            f"cannot run this configuration: " + "; ".join(problems))

    kwargs: dict[str, Any] = dict(skip_tokenizer_init=True, enable_chunked_prefill=False)
    if runtime == "pytorch":
        kwargs.update(max_batch_size=engine.max_sessions, max_seq_len=engine.max_seq_len,
                      max_num_tokens=lim.max_num_tokens,
                      disable_overlap_scheduler=not overlap)
    # A TensorRT engine's limits are compiled in (checked against the config above).
    return LlmPlan(runtime=runtime, grammar_mask=mask, overlap_scheduler=overlap,
                   llm_kwargs=kwargs, notes=notes)
