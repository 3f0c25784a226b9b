"""Moving a Generation (core/generation.py) by hand, outside a scheduler: the tests' way to
give a backend or a row the counters and grammar state it would have after some tokens.

The scheduler advances its running generations' batch rows (core/batch.py BatchState.advance);
these write the same row through BatchState's own attach, so the state set is exactly what a
generation reads back through its public attach/detach path.
"""

from __future__ import annotations

from orpheus_svc.core.batch import BatchState
from orpheus_svc.core.generation import Generation


def set_counters(gen: Generation, **changes) -> None:
    """Set `gen`'s counters: any TokenState field (core/batch.py). A generation holding a
    batch row has that row rewritten (it stays attached); one holding none is attached to a
    scratch row, which is rewritten, and detached again (its `slot` kept)."""
    batch = gen._batch  # which BatchState holds it: Generation does not say so publicly
    if batch is not None:
        _rewrite(batch, gen.slot, gen, changes)
        return
    slot, scratch = gen.slot, BatchState(1)
    gen.attach(scratch, 0)
    _rewrite(scratch, 0, gen, changes)
    gen.detach()
    gen.slot = slot


def _rewrite(batch: BatchState, slot: int, gen: Generation, changes: dict) -> None:
    batch.attach(slot, gen.gen_id, gen.request, gen.seed, batch.read(slot)._replace(**changes))


def feed(gen: Generation, tokens) -> list[tuple[int, ...]]:
    """Advance `gen` by `tokens`: counts them, follows the grammar (raises AudioGrammarError
    as FrameParser does, the bad token counted), returns the frames they complete."""
    parser, n, last, frames = gen.parser, gen.num_generated, gen.last_token, []
    try:
        for tok in tokens:
            n, last = n + 1, tok
            frame = parser.feed_one(tok)
            if frame is not None:
                frames.append(frame)
    finally:
        set_counters(gen, num_generated=n, last_token=last, position=parser.position,
                     frames=parser.frames, stopped=parser.stopped,
                     pending=tuple(parser._pending))
    return frames
