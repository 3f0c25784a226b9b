"""Drive the trtllm backend step by step with the real Scheduler, StreamBridge and a stand-in.

The test thread plays EngineLoop: schedule -> release -> backend.step -> update -> release,
and keeps what came out (frames per generation, finished generations, errors).
"""

from __future__ import annotations

import time
from collections import defaultdict
from functools import partial

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepRow
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, audio_token_id
from orpheus_svc.engine.intake import effective_settings
from orpheus_svc.engine.trtllm.build import sampling_kwargs
from orpheus_svc.engine.trtllm.backend import TrtllmBackend
from orpheus_svc.engine.trtllm.stream import StreamBridge

from .standin import StandInLLM

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


def frame_tokens(frame_index: int) -> list[int]:
    """The 7 ids of a recognisable frame: code = 10 * frame_index + position."""
    return [audio_token_id(p, 10 * frame_index + p) for p in range(7)]


def frame_codes(frame_index: int) -> list[int]:
    return [10 * frame_index + p for p in range(7)]


def speech(frames: int, stop: bool = True) -> list[int]:
    ids = [t for f in range(frames) for t in frame_tokens(f)]
    return ids + [END_OF_SPEECH_ID] if stop else ids


class Driver:
    def __init__(self, slots: int = 4, *, llm: StandInLLM | None = None,
                 clock=time.monotonic, **backend_kwargs) -> None:
        self.llm = llm or StandInLLM()
        self.bridge = StreamBridge(self.llm)
        self.backend = TrtllmBackend(self.bridge, partial(_params, sampling_kwargs),
                                     num_slots=slots, max_seq_len=256,
                                     wait_s=backend_kwargs.pop("wait_s", 0.02), clock=clock,
                                     **backend_kwargs)
        caps = self.backend.capabilities  # as EngineLoop builds its scheduler
        self.scheduler = Scheduler(SlotPool(slots, 256, confirm_frees=caps.confirms_release),
                                   effective_settings(SchedulerSettings(max_waiting=64), caps))
        self.frames: dict[int, list[list[int]]] = defaultdict(list)
        self.finished: dict[int, Generation] = {}
        self.errors: dict[int, str] = {}
        self._ids = 0

    def add(self, max_tokens: int = 70, session: str | None = None, seed: int = 7) -> Generation:
        self._ids += 1
        req = GenerationRequest(session_id=session or f"s{self._ids}", segment_index=0,
                                prompt_ids=PROMPT, max_tokens=max_tokens,
                                sampling=SamplingParams(seed=seed))
        gen = Generation(gen_id=self._ids, request=req, arrival=time.monotonic(), seed=seed)
        self.scheduler.add(gen)
        return gen

    def step(self) -> None:
        now = time.monotonic()
        plan = self.scheduler.schedule(now)
        if plan.released:
            self.scheduler.freed(self.backend.release([g.gen_id for g in plan.released]))
            for g in plan.released:
                self.finished[g.gen_id] = g
        if plan.empty and not self.scheduler.pool.num_draining:
            return
        result = self.backend.step(plan)
        self.errors.update(result.errors)
        out = self.scheduler.update(plan, result, time.monotonic())
        if out.finished:
            self.scheduler.freed(self.backend.release([g.gen_id for g in out.finished]))
        for gen, frames in out.frames:
            self.frames[gen.gen_id].extend(list(f) for f in frames)
        for gen in out.finished:
            self.finished[gen.gen_id] = gen

    def run_until(self, pred, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached while stepping the backend")
            self.step()

    def close(self) -> None:
        self.bridge.close()


class Params:
    """Stands in for tensorrt_llm.SamplingParams: keeps the keyword arguments."""

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs


def _params(kwargs_fn, row: StepRow) -> Params:
    return Params(**kwargs_fn(row))
