"""Teacher-forced parity of the graph step against the eager backend (issue 32 item 7).

Both models get the same weights and their own KV caches, the same prompt (prefilled the
same eager way into both), then the same input tokens every step (teacher forcing: random
legal audio ids, not what either sampled), so the comparison is of one step's arithmetic
at a time, never of two diverging generations:

    eager   SlotLlama.decode -> constrained_logits        (engine/model)
    graph   decode_hidden (its attention kernel and fused ops) -> step_logits (engine/graph)

Reported: the largest |difference| of any finite logit, and how often the two agree on the
top-1 column, over `steps` x `rows`. Sampling with the same uniforms picks the same column
wherever the distributions agree this closely; tokens compared after sampling diverge from
the first differing choice on and say little (issue 28's "differ from step 1").
"""

from __future__ import annotations

import numpy as np
import torch

from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION, FRAME_TOKENS

PROMPT = (128259, 128000, 40, 41, 42, 43, 44, 45, 128009, 128260, 128261, 128257)


def teacher_forced(eager_model, runner, steps: int = 200, rows: int = 8, seed: int = 0) -> dict:
    """Compare eager_model (a SlotLlama) with runner's model (the same weights, its own
    caches) step by step; `rows` must be one of the runner's buckets."""
    from orpheus_svc.engine.graph.step import decode_hidden, step_logits
    from orpheus_svc.engine.model.sampling import constrained_logits

    gmodel, dev = runner.model, runner.model.device
    attend = runner._attend[rows, False]
    slots = list(range(rows))
    rng = np.random.default_rng(seed)
    with torch.inference_mode():
        for m in (eager_model, gmodel):
            m.prefill(slots, [PROMPT] * rows)
        worst, agree = 0.0, 0
        for k in range(steps):
            p_in, p_out = k % FRAME_TOKENS, (k + 1) % FRAME_TOKENS
            ids = [AUDIO_BASE + p_in * CODES_PER_POSITION + int(c)
                   for c in rng.integers(0, CODES_PER_POSITION, rows)]
            pos = [len(PROMPT) + k] * rows
            stop = p_out == 0 and k >= FRAME_TOKENS
            eager = constrained_logits(eager_model.decode(slots, ids, pos), eager_model.lm_head,
                                       [p_out] * rows, [stop] * rows)
            t = lambda v: torch.tensor(v, dtype=torch.long, device=dev)  # noqa: E731
            hidden = decode_hidden(gmodel, t(ids), t(slots), t(pos), attend, runner.ops)
            graph = step_logits(gmodel, hidden, t([p_out] * rows), t([int(stop)] * rows))
            eager, graph = eager.float().cpu(), graph.float().cpu()
            finite = torch.isfinite(eager) & torch.isfinite(graph)
            worst = max(worst, float((eager - graph).abs()[finite].max()))
            agree += int((eager.argmax(-1) == graph.argmax(-1)).sum())
    return {"top1_agreement": round(agree / (steps * rows), 5),
            "max_abs_logit_diff": round(worst, 6), "steps": steps, "rows": rows}
