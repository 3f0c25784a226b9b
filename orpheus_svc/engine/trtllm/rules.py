"""TensorRT-LLM's own rules that the trtllm backend relies on, checked once at start-up.

    plan_llm(manifest, engine, trtllm_version) -> LlmPlan   (or TrtllmStartupError naming
                                                              every problem)

runs before tensorrt_llm is imported and before any GPU is touched (the version comes from
the package metadata). Each rule was read from TensorRT-LLM's source; READ_FROM says which
files and which versions, docs/tensorrt-llm.md has the details:

  features  Every request carries our logits processor (processor.py): the repetition
            penalty always, the audio-grammar mask unless engine.trtllm_grammar_mask is
            false. Both read the frame position from the request's last token. The PyTorch
            backend applies processors inside the forward step to request.get_tokens(),
            and with its overlap scheduler the previous step's token is added only after
            that forward step: the mask would forbid the right position and the penalty
            would hit another position's ids. So the overlap scheduler is off ("auto",
            "off"), and "on" is refused.
  backend   The TensorRT engine runtime (tensorrt_llm._tensorrt_engine.LLM) has no
            disable_overlap_scheduler argument (it rejects it), so "on" is refused there
            and the argument is never passed to it.
  limits    Chunked prefill stays off (our admission relies on it). Without it the
            TensorRT runtime refuses prompt + max_tokens > the engine's max_seq_len (the
            per-request clamp, core.prompt.fit_to_slot, keeps every request inside), and
            the PyTorch runtime refuses a prompt longer than max_num_tokens, so the
            longest prompt our admission lets through must fit max_num_tokens. A TensorRT
            engine is compiled for its batch size and context; the config must fit them.
  penalty   The PyTorch runtime's default sampler (TorchSampler) ignores
            SamplingParams.repetition_penalty in the 1.2 line. We apply it in our processor
            with the torch backend's semantics and never send it (a version that applies
            it would penalise twice).
  seed      The same sampler draws every request from one generator seeded 42: a
            per-request seed does nothing. A client's seed is refused per call on that
            runtime (LlmPlan.seed_refusal; FrontRuntime.request, TrtllmBackend) with the
            reason and the version; the TensorRT runtime's C++ sampler seeds each request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orpheus_svc.core.tokens import FRAME_TOKENS

from orpheus_svc.engine.trtllm.manifest import FORMAT_ENGINE, Manifest
from orpheus_svc.engine.trtllm.startup import SUPPORTED_SERIES, TrtllmStartupError

_ON = ("on", "true")

# What each rule was read from: TensorRT-LLM files and symbols, and the versions they
# belong to (no release tag could be checked out; docs/tensorrt-llm.md names revisions).
READ_FROM = {
    "features": "1.0 docs to the 1.2 line: tensorrt_llm/_torch/pyexecutor/model_engine.py "
                "_execute_logit_post_processors, py_executor.py _executor_loop_overlap",
    "backend": "the 1.2 line: tensorrt_llm/_tensorrt_engine.LLM (the TensorRT runtime, "
               "removed upstream after 1.2)",
    "limits": "the 1.x line: tensorrt_llm/llmapi/llm.py BaseLLM._check_arguments",
    "penalty": "the 1.1/1.2 line: tensorrt_llm/_torch/pyexecutor/sampler.py "
               "_request_get_sampling_params and sampling_utils.py UtilsSamplingParams "
               "(temperature, top_p, top_k, beam width only); NVIDIA/TensorRT-LLM#9442 "
               "reproduces it on 1.2.0rc3; TorchSampler applies penalties only from PR "
               "#16485, merged after 1.2.1",
    "seed": "the 1.1/1.2 line: tensorrt_llm/_torch/pyexecutor/sampler.py "
            "TorchSampler.__init__/get_generator (one torch.Generator seeded 42); "
            "per-request seeds only from PR #17172, merged after 1.2.1",
    "seed (TensorRT runtime)": "cpp/tensorrt_llm/layers/samplingLayer.cpp "
                               "SamplingLayer::setup seeds each request's curand state from "
                               "its randomSeed (rev. 0396172, release not identified)",
    "penalty (TensorRT runtime)": "cpp/tensorrt_llm/kernels/penaltyKernels.cu counts the "
                                  "prompt's ids for the repetition penalty (PR #5623)",
}


@dataclass(frozen=True)
class LlmPlan:
    """What the backend asks TensorRT-LLM for, decided before anything is loaded."""

    runtime: str                 # "pytorch" (tensorrt_llm.LLM) | "tensorrt" (_tensorrt_engine.LLM)
    grammar_mask: bool           # the audio-grammar logits processor goes with every request
    overlap_scheduler: bool      # the PyTorch backend's overlap scheduler
    llm_kwargs: dict[str, Any]   # LLM(...) keyword arguments besides model and kv_cache_config
    notes: list[str] = field(default_factory=list)  # decisions to log at start-up, with why
    # Why a client's per-request seed is refused on this runtime (None: it is honoured).
    seed_refusal: str | None = None


def plan_llm(manifest: Manifest, engine: Any, trtllm_version: str | None = None) -> LlmPlan:
    """Check the configured combination against TensorRT-LLM's rules (module docstring);
    raise TrtllmStartupError listing every violation, each naming its settings.
    `trtllm_version`: the installed tensorrt_llm's (None: unknown)."""
    runtime = manifest.runtime
    mask = bool(engine.trtllm_grammar_mask)
    wanted = str(engine.trtllm_overlap_scheduler).strip().lower()
    problems: list[str] = []
    notes: list[str] = []

    # -- features: our logits processor x overlap scheduler ----------------------------------
    overlap = False
    if runtime == "pytorch":
        if wanted in _ON:
            problems.append(
                "engine.trtllm_overlap_scheduler is on: under it TensorRT-LLM hands a logits "
                "processor the tokens of the step before last, and every request's processor "
                "reads the frame position from the last token, so the repetition penalty "
                "would hit another position's ids"
                + (" and the audio-grammar mask (engine.trtllm_grammar_mask) would forbid the "
                   "right position (every session would fail after 2 tokens)" if mask else "")
                + ". Set engine.trtllm_overlap_scheduler to auto or off")
        notes.append("overlap scheduler disabled (disable_overlap_scheduler=True): the logits "
                     "processor (repetition penalty" + (", audio-grammar mask" if mask else "")
                     + ") needs each request's previous token, which TensorRT-LLM adds only "
                     "after the next forward step when the overlap scheduler is on")
    elif wanted in _ON:
        problems.append(
            f"engine.trtllm_overlap_scheduler is on, but {engine.trtllm_engine_dir} is a "
            f"TensorRT engine ({manifest.format}): its runtime "
            f"(tensorrt_llm._tensorrt_engine.LLM) has no overlap scheduler setting. Set "
            f"it to auto or off, or build the pytorch artifact")

    # -- penalty and seed: what TensorRT-LLM's sampler applies -------------------------------
    notes.append("repetition penalty applied by our logits processor (the torch backend's "
                 "semantics) and not sent to TensorRT-LLM: " + _penalty_reason(runtime))
    seed_refusal = seed_refusal_reason(runtime, trtllm_version)
    notes.append("per-request seeds " + (
        "refused: " + seed_refusal if seed_refusal else
        "honoured: " + READ_FROM["seed (TensorRT runtime)"]))

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
                   llm_kwargs=kwargs, notes=notes, seed_refusal=seed_refusal)


def _penalty_reason(runtime: str) -> str:
    if runtime == "pytorch":
        return ("the PyTorch runtime's default sampler ignores "
                "SamplingParams.repetition_penalty (" + READ_FROM["penalty"] + ")")
    return ("the TensorRT runtime's C++ sampler would also penalise the prompt's ids, which "
            "the torch backend does not (" + READ_FROM["penalty (TensorRT runtime)"] + ")")


def seed_refusal_reason(runtime: str, trtllm_version: str | None) -> str | None:
    """Why a client's per-request seed cannot be honoured on `runtime` with this TensorRT-LLM
    version, naming both (None: it is honoured). Only the TensorRT runtime's C++ sampler was
    read to seed each request; a PyTorch-runtime version other than the 1.2 line was not
    read, and is treated like it rather than trusted."""
    if runtime != "pytorch":
        return None
    version = trtllm_version or "(version unknown)"
    read = ("" if trtllm_version and trtllm_version.startswith(SUPPORTED_SERIES + ".") else
            f" (that is what the {SUPPORTED_SERIES} line does; {version} was not read)")
    return (f"TensorRT-LLM {version} does not honour a per-request seed on its PyTorch runtime"
            f"{read}: its default sampler (TorchSampler) draws every request from one "
            f"generator seeded 42 (tensorrt_llm/_torch/pyexecutor/sampler.py, "
            f"TorchSampler.get_generator); per-request seeds came with NVIDIA/TensorRT-LLM "
            f"PR #17172, after 1.2.1. Leave the seed out, or use engine.backend torch, or a "
            f"TensorRT engine (orpheus-build-engine --backend tensorrt), whose sampler seeds "
            f"each request")
