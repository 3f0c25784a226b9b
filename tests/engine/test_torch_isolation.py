"""Fault isolation on the torch backend (issue 10): a step that raises mid-way (after the
forward pass wrote KV, before sampling finished) is re-run in parts by EngineLoop; the
innocent rows' tokens come out exactly as in a run without the failing row, which is what
makes TorchBackend.retry_safe true."""

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.torch.backend import TorchBackend

from .harness import Collector, RecordingFlusher
from .tiny import tiny_model

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)
BAD_SEED = 999


class _FailsForOneSeed(TorchBackend):
    """Raises in sampling (after the forward pass) while a BAD_SEED row is at token >= 14."""

    def sample(self, gens, hidden):
        if any(g.seed == BAD_SEED and g.num_generated >= 14 for g in gens):
            raise OverflowError("injected: sampling failed for one row")
        return super().sample(gens, hidden)


def _run(backend_cls, seeds):
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(backend_cls(tiny_model(num_slots=8, max_seq_len=256)), flusher, events,
                      settings=SchedulerSettings(max_batch_size=8), seed=1)
    core.start()
    try:
        ids = [core.submit(GenerationRequest(session_id=f"s{i}", segment_index=0,
                                             prompt_ids=PROMPT, max_tokens=42,
                                             sampling=SamplingParams(seed=s)))
               for i, s in enumerate(seeds)]
        events.wait_for(lambda ev: events.ended(ids))
        fin = events.finishes()
        return [(fin[g].reason, flusher.frames[g]) for g in ids], core
    finally:
        core.stop()


def test_a_row_that_fails_mid_step_fails_alone_and_the_others_keep_their_exact_tokens():
    seeds = [11, 12, BAD_SEED, 13, 14, 15]
    got, core = _run(_FailsForOneSeed, seeds)
    reference, _ = _run(TorchBackend, [s for s in seeds if s != BAD_SEED])
    assert got[2][0] == "error" and core.failed_rows == 1 and core.isolation_retries > 0
    innocents = got[:2] + got[3:]
    assert [r for r, _ in innocents] == ["length"] * 5
    assert [f for _, f in innocents] == [f for _, f in reference]  # token for token
    assert core.stats().free_slots == 8
