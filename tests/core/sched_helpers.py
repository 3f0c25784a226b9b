"""Plain-object helpers for scheduler tests (no torch, no grpc)."""

from itertools import count

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, audio_token_id

_ids = count(1)


def make_gen(session="s", segment=0, arrival=0.0, prompt_len=8, max_tokens=700, expected_frames=0):
    req = GenerationRequest(session_id=session, segment_index=segment,
                            prompt_ids=tuple(range(prompt_len)), max_tokens=max_tokens,
                            expected_frames=expected_frames)
    gid = next(_ids)
    return Generation(gen_id=gid, request=req, arrival=arrival, seed=gid)


def make_scheduler(slots=4, batch=4, waiting=8, aging=64, max_prefill_tokens=4096):
    return Scheduler(SlotPool(slots, 4096), SchedulerSettings(
        max_batch_size=batch, max_waiting=waiting, aging_steps=aging,
        max_prefill_tokens=max_prefill_tokens))


def ids(items):
    """gen ids of plan rows (or generations), in order."""
    return [x.gen_id for x in items]


def legal_token(gen, stop=False):
    """The next token a well-behaved backend would emit for `gen` (a StepRow, or a
    Generation: both carry the grammar state)."""
    if stop and gen.stop_allowed:
        return END_OF_SPEECH_ID
    return audio_token_id(gen.frame_position, (gen.gen_id * 31 + gen.num_generated) % 4096)


def run_step(sched, now, stop_ids=()):
    plan = sched.schedule(now)
    result = StepResult(tokens={g.gen_id: [legal_token(g, g.gen_id in stop_ids)] for g in plan.rows})
    return plan, sched.update(plan, result, now)


def run_until_frames(sched, gen, frames, now, dt=0.001):
    while gen.num_frames < frames:
        run_step(sched, now)
        now += dt
    return now
