"""What the engine accepts, checked once on the engine thread: a request's per-row inputs
(row_problem) and the scheduler settings a backend really runs with (effective_settings).
"""

from __future__ import annotations

import dataclasses

from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import BackendCapabilities


def row_problem(req: GenerationRequest, max_adapters: int = 0) -> str | None:
    """Why a request's per-row inputs cannot go to a backend, or None.

    A guard, not a second validation: a request from an edge was validated there
    (server/settings.py) with the same rule, `SamplingParams.validate`, so this never
    refuses one. It stays because the engine is an edge of its own (a split topology's
    engine process takes requests off a socket; warm-up and benchmarks submit
    directly), and a NaN or a non-integer seed must fail its own row, not a batch."""
    try:
        req.sampling.validate()
    except ValueError as exc:
        return f"sampling: {exc}"
    if req.max_tokens < 1:
        return f"max_tokens must be >= 1, got {req.max_tokens}"
    if not req.prompt_ids:
        return "empty prompt"
    if not (isinstance(req.prefix_len, int) and 0 <= req.prefix_len < len(req.prompt_ids)):
        # a prefix is followed by the turn that generation starts from
        return (f"prefix_len {req.prefix_len!r} must be 0..{len(req.prompt_ids) - 1} "
                f"(the prompt is {len(req.prompt_ids)} tokens)")
    if not (isinstance(req.adapter, int) and -1 <= req.adapter < max_adapters):
        # a pool slot the backend does not hold would read another adapter's weights or
        # none: the row fails alone (BackendCapabilities.max_adapters)
        return (f"adapter slot {req.adapter!r} is not one of this engine's "
                f"{max_adapters} (engine.max_adapters; -1 is the base model)")
    return None


def effective_settings(settings: SchedulerSettings,
                       caps: BackendCapabilities) -> SchedulerSettings:
    """The scheduler settings a backend really runs with: the configured ones, adjusted
    here and only here for what the backend is (core/step.py, BackendCapabilities). A
    backend that streams deltas gets every running generation in every plan, no prefill
    budget and no playout horizon; one with a prefill limit of its own a budget no larger."""
    if caps.max_prefill_tokens and caps.max_prefill_tokens < settings.max_prefill_tokens:
        settings = dataclasses.replace(settings, max_prefill_tokens=caps.max_prefill_tokens)
    if not caps.streams_deltas:
        return settings
    return dataclasses.replace(
        settings, max_batch_size=max(settings.max_batch_size, caps.num_slots),
        max_prefill_tokens=caps.num_slots * caps.max_seq_len, max_ahead_seconds=0.0)
