"""A benchmark level on the sim in virtual time: the server's scheduler and the sim backend,
driven by one loop on a clock that only the modelled steps move. No threads, no gRPC.

What runs is the server's own logic where it decides the timings: sessions are cut into
segments by the server's segmenter (server/segmenter.py) and normalised as the session
does, prompts and budgets come from core/prompt.py, and every step is planned and applied
by core/scheduler.py (admission, row budget, deferral by slack, batch order) with the
settings orpheus-svc derives from an EngineConfig. The step lasts what the sim backend
(engine/sim/backend.py) models from its GpuProfile, on the virtual clock:

    t:  session starts (ramp)   schedule(t) -> plan -> SimBackend.step (t += step) -> update(plan, t)
                                    ^                                              |
                                    +---- segment ends: the session submits the ---+
                                          next one (at most max_segments_in_flight)

Listeners are orpheus-bench's (bench/orpheus_bench/load.py): slot j of C starts its one
session at ramp x j / C with text j of the set (--rounds 1), sent whole. A session's first
audio is when its segment 0 completes frame 0 (the flusher sends the head of frame 0 at
once: audio/windows.py), plus one codec call on that frame (the profile's SNAC cost) and
`edge_s`, the gRPC edge's share of a client's time to first byte.

Left out, so a result is the engine's timing alone: the flusher's queue (it decodes each
window as soon as its frames exist), run-ahead (the sim backend does not run ahead; it
hides host time the way run-ahead does: docs/capacity.md, "Pacing in the sim"), the few
milliseconds between a segment's last token and its final event reaching the session, and
the host time of this process (the clock does not move while Python runs).

    level = simulate(get_profile("h200-server"), Level(sessions=128))
    level.step_period_s, level.ttfb_p95_s
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from orpheus_svc.config import EngineConfig, TextConfig
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.normalize import normalize_text
from orpheus_svc.core.prompt import build_prompt, expected_audio_seconds, max_tokens_for_text
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.tokens import BOS_ID, FRAME_SECONDS
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import GpuProfile
from orpheus_svc.server.segmenter import SentenceBuffer

from .texts import make_texts


def byte_encode(text: str) -> list[int]:
    """The random checkpoint's tokenizer (models/tokenizer.py build_byte_level_tokenizer_json:
    BOS, then one token per UTF-8 byte), as bench/gpu_engine.py writes it for a GPU run."""
    return [BOS_ID, *text.encode()]


# The H200 run's server (bench/results/gpu-engine-h200/README.txt): these settings, the
# rest orpheus-svc's defaults.
H200_RUN_ENGINE = EngineConfig(backend="sim", max_sessions=320, max_seq_len=512,
                               max_batch_size=256, max_waiting=1024, row_budget="true")


@dataclass(frozen=True)
class Level:
    """One orpheus-bench level: `sessions` listeners, one session each (--rounds 1)."""

    sessions: int
    ramp_s: float = 16.7            # --ramp auto in the H200 run
    text_set: str = "conversational"
    text_count: int = 64            # orpheus-bench --texts, --text-seed defaults
    text_seed: int = 0
    voice: str = "tara"
    engine: EngineConfig = H200_RUN_ENGINE
    text: TextConfig = TextConfig()
    # the backend's own cap on a step's prompt tokens (the graph engine's
    # engine.graph_prefill_rows, BackendCapabilities.max_prefill_tokens); None: none
    backend_prefill_tokens: int | None = None
    never_stop: bool = True          # random weights: every segment runs to max_tokens
    encode: object = byte_encode
    edge_s: float = 0.0028           # client TTFB - server TTFA, mean of the H200 run at 128


@dataclass
class LevelResult:
    """What orpheus-bench reports of a level, from the virtual clock."""

    sessions: int
    wall_s: float                   # first session's start to the last one's end
    steps: int
    rows: int                       # summed over steps
    generations: int
    tokens: int
    prefill_steps: int              # steps that held a prompt (an eager prefill launch each)
    prefill_tokens: int
    ttfb_s: list[float] = field(default_factory=list)

    @property
    def step_period_s(self) -> float:
        return self.wall_s / self.steps if self.steps else 0.0

    @property
    def mean_batch(self) -> float:
        return self.rows / self.steps if self.steps else 0.0

    def ttfb_percentile(self, q: float) -> float:
        # numpy's default (linear) percentile, as bench/orpheus_bench/metrics.py summarize
        return float(np.percentile(self.ttfb_s, q)) if self.ttfb_s else math.nan

    @property
    def ttfb_p95_s(self) -> float:
        return self.ttfb_percentile(95)

    def summary(self) -> dict:
        return {"sessions": self.sessions, "wall_s": round(self.wall_s, 3),
                "steps": self.steps, "step_period_ms": round(self.step_period_s * 1e3, 2),
                "mean_batch": round(self.mean_batch, 1), "generations": self.generations,
                "tokens": self.tokens, "prefill_steps": self.prefill_steps,
                "prefill_tokens": self.prefill_tokens,
                "ttfb_ms": {q: round(self.ttfb_percentile(q) * 1e3, 1) for q in (50, 95, 99)}}


class _Clock:
    """The virtual clock: time moves only by sleep() (the modelled steps) and jumps."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.0)


@dataclass
class _Session:
    index: int
    start: float
    segments: list[GenerationRequest]
    submitted: int = 0
    ended: list[bool] = field(default_factory=list)
    delivered: int = 0
    first_audio: float | None = None
    end: float | None = None


def session_requests(level: Level, index: int, text: str) -> list[GenerationRequest]:
    """Segment requests of one session, as server/session.py and runtime.py build them."""
    buf = SentenceBuffer(level.text.max_segment_chars, level.text.first_clause_min_chars)
    cuts = buf.push_cuts(text) + buf.flush_cuts()
    out = []
    for i, cut in enumerate(cuts):
        spoken = normalize_text(cut.text, "en") if level.text.normalize else cut.text
        out.append(GenerationRequest(
            session_id=f"s{index}", segment_index=i,
            prompt_ids=tuple(build_prompt(level.encode, level.voice, spoken)),
            max_tokens=max_tokens_for_text(spoken),
            expected_frames=max(1, round(expected_audio_seconds(spoken) / FRAME_SECONDS))))
    return out


def simulate(profile: GpuProfile, level: Level, *, max_steps: int = 200_000) -> LevelResult:
    """Run one level to its end on the virtual clock; see the module docstring."""
    clock = _Clock()
    e = level.engine
    settings = e.scheduler_settings("cuda")
    if level.backend_prefill_tokens and level.backend_prefill_tokens < settings.max_prefill_tokens:
        settings = dataclasses.replace(settings, max_prefill_tokens=level.backend_prefill_tokens)
    sched = Scheduler(SlotPool(e.max_sessions, e.max_seq_len), settings)
    backend = SimBackend(profile, num_slots=e.max_sessions, max_seq_len=e.max_seq_len,
                         length_sigma=0.0, clock=clock, sleep=clock.sleep,
                         never_stop=level.never_stop)
    texts = make_texts(level.text_set, level.text_count, level.text_seed)
    n = level.sessions
    sessions = [_Session(j, level.ramp_s * j / max(n, 1),
                         session_requests(level, j, texts[j % len(texts)])) for j in range(n)]
    for s in sessions:
        s.ended = [False] * len(s.segments)
    of_gen: dict[int, tuple[_Session, int]] = {}
    ids = iter(range(1, 1 << 62))
    first_chunk_s = profile.codec_seconds(1.0) if profile.codec_peak_flops else 0.0
    result = LevelResult(n, 0.0, 0, 0, 0, 0, 0, 0)
    pending = list(reversed(sessions))  # by start time, the next one last
    live = 0

    def submit(s: _Session) -> None:
        limit = min(s.delivered + level.text.max_segments_in_flight, len(s.segments))
        while s.submitted < limit:
            gen_id = next(ids)
            seed = gen_id * 0x9E3779B1 & 0xFFFFFFFFFFFF
            sched.add(Generation(gen_id=gen_id, request=s.segments[s.submitted],
                                 arrival=clock(), seed=seed))
            of_gen[gen_id] = (s, s.submitted)
            s.submitted += 1

    while pending or live:
        while pending and pending[-1].start <= clock():
            s = pending.pop()
            live += 1
            submit(s)
        plan = sched.schedule(clock())
        if plan.released:  # nothing cancels here; kept for a plan that frees slots anyway
            sched.freed(backend.release([g.gen_id for g in plan.released]))
        if plan.empty:
            wake = pending[-1].start if pending else math.inf
            if plan.idle_s > 0:
                wake = min(wake, clock() + plan.idle_s)
            if wake == math.inf:
                raise RuntimeError("the level stalled: nothing runs and nothing arrives")
            clock.t = max(clock.t, wake)
            continue
        if result.steps >= max_steps:
            raise RuntimeError(f"the level ran past {max_steps} steps")
        step = backend.step(plan)
        now = clock()
        out = sched.update(plan, step, now)
        rows = plan.num_rows
        result.steps += 1
        result.rows += rows
        if plan.prefill:
            result.prefill_steps += 1
            result.prefill_tokens += sum(len(g.request.prompt_ids) for g in plan.prefill)
        for gen, _codes in out.frames:
            s, i = of_gen[gen.gen_id]
            if i == 0 and s.first_audio is None:
                s.first_audio = now + first_chunk_s
                result.ttfb_s.append(s.first_audio + level.edge_s - s.start)
        if out.finished:
            sched.freed(backend.release([g.gen_id for g in out.finished]))
        for gen in out.finished:
            s, i = of_gen.pop(gen.gen_id)
            result.generations += 1
            result.tokens += gen.num_generated
            s.ended[i] = True
            while s.delivered < len(s.segments) and s.ended[s.delivered]:
                s.delivered += 1
            if s.delivered == len(s.segments):
                s.end = now
                live -= 1
            else:
                submit(s)
    result.wall_s = max(s.end for s in sessions) - sessions[0].start
    return result
