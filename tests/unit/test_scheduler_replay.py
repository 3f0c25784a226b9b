"""The scheduler split by concern decides the same things as the one it replaced, step for step.

Before issue 38 one class held admission, the budget's deferrals, the parking of sessions far
ahead and the playout clocks; tests/unit/legacy_scheduler.py is that class, frozen. Each life
below is seeded-random and fed to both: sessions arrive with several segments each, steps run
(some launched ahead of their tokens, as the graph engine does), tokens come back legal,
stopping, breaking the grammar, several at once, or failing; clients cancel; a backend that
drains confirms its ends late. Every answer is compared: each StepPlan (rows in order,
admitted, released, refused, idle time), each step planned ahead, each update's outcome
(frames and ends), the playout snapshots, the counters, and the generations' own state.

Run-ahead changed on purpose since (issue 32 item 2): the frozen scheduler planned a step
ahead only when nothing waited, was cancelled, drained or parked (schedule_ahead, else None);
today's plans one whatever joins or leaves (schedule with the step in flight). Where the
frozen one ran ahead, today's must give the same plan; where it declined, both go on as the
frozen one did (the step after is planned once the tokens are known), and the steps today's
runs ahead of the frozen one are checked in tests/unit/test_scheduler_in_flight.py.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.prompt import PromptTooLong, fit_to_slot
from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS, audio_token_id

from . import legacy_scheduler as legacy


@dataclass
class Life:
    """One seeded life: the engine's shape, its settings and how its clients behave."""

    seed: int
    steps: int = 1200
    slots: int = 8
    max_seq_len: int = 4096
    confirm_frees: bool = False  # a backend whose ends drain (TensorRT-LLM)
    runs_ahead: bool = False     # a backend that launches the next step first (graph)
    settings: dict = field(default_factory=dict)
    # settings swapped in at these steps (the benchmark swaps settings on a live scheduler)
    swaps: dict = field(default_factory=dict)
    sessions: int = 12
    max_segments: int = 4
    arrival_p: float = 0.08
    cancel_p: float = 0.02
    stop_p: float = 0.03
    bad_p: float = 0.002     # a token that breaks the grammar
    error_p: float = 0.002   # a row the backend fails
    multi_p: float = 0.0     # rows given 0..3 tokens at once (a backend that streams deltas)
    prompt_lens: tuple[int, ...] = (6, 9, 30, 200)
    # what this life must reach besides admissions, frames, ends and a queue (replay's counts)
    expect: tuple[str, ...] = ()


LIVES = {
    "plain": Life(1, slots=8, expect=("full", "rejected", "refused"), settings=dict(
        max_batch_size=4, max_waiting=6, aging_steps=8, max_prefill_tokens=64)),
    "row-budget": Life(2, slots=24, expect=("deferred",), settings=dict(
        max_batch_size=24, max_waiting=16, row_budget=True)),
    "horizon": Life(3, slots=16, expect=("parked", "full"), settings=dict(
        max_batch_size=6, max_waiting=8, aging_steps=16, max_ahead_seconds=0.4)),
    "horizon-idle": Life(11, slots=4, sessions=3, arrival_p=0.03, cancel_p=0.003,
                         expect=("parked_idle",),
                         settings=dict(max_batch_size=4, max_ahead_seconds=0.2)),
    "horizon-and-budget": Life(4, slots=16, expect=("parked", "deferred"), settings=dict(
        max_batch_size=16, max_waiting=8, max_ahead_seconds=0.3, row_budget=True,
        row_budget_headroom=0.5)),
    "draining": Life(5, slots=4, confirm_frees=True, expect=("full", "released", "refused"),
                     settings=dict(max_batch_size=4, max_waiting=3)),
    "run-ahead": Life(6, slots=8, runs_ahead=True, stop_p=0.05, expect=("ahead", "deferred"),
                      settings=dict(max_batch_size=8, max_waiting=8, row_budget=True)),
    "run-ahead-over-the-batch": Life(7, slots=12, runs_ahead=True, expect=("ahead", "full"),
                                     settings=dict(max_batch_size=5, max_waiting=8)),
    "run-ahead-full": Life(14, slots=6, sessions=3, max_segments=8, arrival_p=0.05,
                           runs_ahead=True, expect=("ahead", "full", "deferred"),
                           settings=dict(max_batch_size=6, max_prefill_tokens=64)),
    "run-ahead-draining": Life(12, slots=6, runs_ahead=True, confirm_frees=True,
                               expect=("ahead", "released"),
                               settings=dict(max_batch_size=6, max_waiting=4)),
    "run-ahead-horizon": Life(13, slots=8, sessions=4, runs_ahead=True, expect=("parked",),
                              settings=dict(max_batch_size=8, max_ahead_seconds=0.3)),
    "long-prompts": Life(15, slots=6, max_seq_len=256, prompt_lens=(6, 30, 200, 250, 300),
                         expect=("full", "too long", "cut"),
                         settings=dict(max_batch_size=6, max_waiting=4)),
    "deltas": Life(8, slots=6, multi_p=0.5, confirm_frees=True, expect=("full", "released"),
                   settings=dict(max_batch_size=6, max_waiting=4, max_prefill_tokens=10**6)),
    "many-sessions": Life(9, steps=900, slots=32, sessions=64, max_segments=5, arrival_p=0.5,
                          expect=("full", "deferred", "rejected", "refused"),
                          settings=dict(max_batch_size=16, max_waiting=24, aging_steps=32,
                                        row_budget=True, row_budget_headroom=0.1)),
    "settings-swapped": Life(10, slots=12, expect=("parked", "deferred"),
                             settings=dict(max_batch_size=6, max_waiting=8),
                             swaps={300: dict(max_batch_size=6, max_waiting=8,
                                              max_ahead_seconds=0.2),
                                    450: dict(max_batch_size=6, max_waiting=8,
                                              max_ahead_seconds=0.6),
                                    600: dict(max_batch_size=12, max_waiting=8,
                                              row_budget=True),
                                    900: dict(max_batch_size=3, max_waiting=2)}),
}


class Twin:
    """The old and the new scheduler, fed the same calls; each answer compared."""

    def __init__(self, life: Life) -> None:
        self.life = life
        pools = [SlotPool(life.slots, life.max_seq_len, confirm_frees=life.confirm_frees)
                 for _ in range(2)]
        self.old = legacy.Scheduler(pools[0], legacy.SchedulerSettings(**life.settings))
        self.new = Scheduler(pools[1], SchedulerSettings(**life.settings))
        self.gens: dict[int, tuple[Generation, Generation]] = {}  # gen_id -> (old, new)
        self.session_ids: list[str] = []

    def swap(self, settings: dict) -> None:
        self.old.settings = legacy.SchedulerSettings(**settings)
        self.new.settings = SchedulerSettings(**settings)

    def add(self, gen_id: int, req: GenerationRequest, now: float) -> str:
        """Submit to both: "queued", "rejected" (the waiting cap), "too long" (the slot)."""
        pair = tuple(Generation(gen_id=gen_id, request=req, arrival=now, seed=gen_id)
                     for _ in range(2))
        try:
            fit_to_slot(len(req.prompt_ids), req.max_tokens, self.life.max_seq_len)
        except PromptTooLong:
            # The old scheduler never saw such a prompt: the engine loop refused it first.
            # Now the scheduler's add() is that one check.
            with pytest.raises(PromptTooLong):
                self.new.add(pair[1])
            return "too long"
        answers = []
        for sched, gen in zip((self.old, self.new), pair):
            try:
                sched.add(gen)
                answers.append(None)
            except (AdmissionError, legacy.AdmissionError) as exc:
                answers.append(str(exc))
        assert answers[0] == answers[1]
        self.gens[gen_id] = pair
        return "queued" if answers[0] is None else "rejected"

    def cancel(self, gen_id: int, now: float) -> None:
        a, b = self.old.cancel(gen_id, now), self.new.cancel(gen_id, now)
        assert _gen_key(a) == _gen_key(b)

    def schedule(self, now: float):
        a, b = self.old.schedule(now), self.new.schedule(now)
        assert _plan_key(a) == _plan_key(b), now
        return a, b

    def schedule_ahead(self, plans, now: float):
        a = self.old.schedule_ahead(plans[0], now)
        if a is None:  # the frozen one declined: today's would not (module docstring)
            return None
        b = self.new.schedule(now, in_flight=plans[1])
        # a plan made in flight forgets idle sessions as every plan does; the frozen one's
        # schedule_ahead did not (its next schedule() did, one step later)
        self.old._forget_idle_sessions(now)
        assert _plan_key(a) == _plan_key(b), now
        return a, b

    def update(self, plans, result: StepResult, now: float):
        a = self.old.update(plans[0], result, now)
        b = self.new.update(plans[1], result, now)
        assert _outcome_key(a) == _outcome_key(b), now
        # today's update hands the snapshots out with its pushes (StepOutput.pushes: one
        # per generation with frames, in order, then the moved ones, not final); the frozen
        # one's caller asked for them after the update
        for (ga, _), push in zip(a.frames, b.pushes):
            pa, pb = self.old.playout_update(ga, now), push.playout
            assert (pa and pa.starts_at) == (pb and pb.starts_at)
        moved = [[(g.gen_id, p.starts_at) for g, p in self.old.playout_moved(now)],
                 [(p.gen_id, p.playout.starts_at) for p in b.pushes[len(b.frames):]
                  if not p.final]]
        assert moved[0] == moved[1]
        return a, b

    def freed(self, gen_ids) -> None:
        self.old.freed(gen_ids)
        self.new.freed(gen_ids)

    def check(self, now: float, rng: random.Random, everything: bool) -> None:
        """The counters and queries; every generation's state when `everything`."""
        old, new = self.old, self.new
        assert dataclasses.asdict(old.stats(now)) == dataclasses.asdict(new.stats(now))
        assert old.has_work == new.has_work
        assert [g.gen_id for g in old.running()] == [g.gen_id for g in new.running()]
        assert old.pool.num_free == new.pool.num_free
        assert old.pool.num_draining == new.pool.num_draining
        if self.gens:
            gid = rng.randrange(1, len(self.gens) + 2)
            assert _gen_key(old.get(gid)) == _gen_key(new.get(gid))
            sid = f"s{rng.randrange(self.life.sessions)}"
            assert old.buffered_seconds(sid, now) == new.buffered_seconds(sid, now)
        if everything:
            for a, b in self.gens.values():
                assert self._state(a) == self._state(b), a.gen_id

    def _state(self, gen: Generation) -> tuple:
        # The old scheduler cut max_tokens to the slot at admission, the new one when it
        # queues: compare the budgets as fitted (fitting twice changes nothing). The plans'
        # rows carry the requests as the backend gets them, compared as they are.
        req = gen.request
        req = dataclasses.replace(req, max_tokens=fit_to_slot(
            len(req.prompt_ids), req.max_tokens, self.life.max_seq_len))
        return (gen.slot, gen.num_frames, gen.cancelled, gen.finish_reason, gen.steps_waited,
                gen.frames_not_in_playout, gen.num_generated, gen.last_token, req)


def _gen_key(gen: Generation | None):
    return None if gen is None else (gen.gen_id, gen.finish_reason)


def _plan_key(plan) -> tuple:
    return (plan.step, plan.prefill, plan.decode.rows, [g.gen_id for g in plan.admitted],
            [g.gen_id for g in plan.released], plan.idle_s,
            [(g.gen_id, why) for g, why in plan.refused])


def _outcome_key(out) -> tuple:
    return ([(g.gen_id, codes.tolist()) for g, codes in out.frames],
            [(g.gen_id, g.finish_reason) for g in out.finished])


def _tokens(rng: random.Random, row, life: Life, one: bool) -> list[int]:
    """What a backend samples for `row` this step: mostly legal audio, sometimes the stop id
    where it may come, rarely a token that breaks the grammar; with `one` False, 0..3
    tokens (a backend that streams deltas)."""
    if rng.random() < life.bad_p:
        return [7 if row.stop_allowed else END_OF_SPEECH_ID]
    if row.stop_allowed and rng.random() < life.stop_p:
        return [END_OF_SPEECH_ID]
    n = 1 if one or rng.random() >= life.multi_p else rng.randrange(4)
    out, pos = [], row.frame_position
    for _ in range(n):
        out.append(audio_token_id(pos, rng.randrange(4096)))
        pos = (pos + 1) % FRAME_TOKENS
    return out


def _result(rng: random.Random, plan, life: Life, draining: list[int]) -> StepResult:
    """A backend's answer to `plan`: tokens by gen_id or the decode rows' array, a failed
    row now and then, and (a backend that drains) some earlier ends confirmed."""
    result = StepResult()
    as_array = len(plan.decode) and life.multi_p == 0 and rng.random() < 0.5
    rows = plan.prefill if as_array else plan.rows
    for row in rows:
        result.tokens[row.gen_id] = _tokens(rng, row, life, one=life.multi_p == 0)
    if as_array:
        result.decode_tokens = np.array(
            [_tokens(rng, row, life, one=True)[0] for row in plan.decode], np.int64)
    for row in plan.rows:
        if rng.random() < life.error_p:
            result.errors[row.gen_id] = "the backend failed this row"
    if draining:
        confirmed = [g for g in draining if rng.random() < 0.3]
        for g in confirmed:
            draining.remove(g)
        result.freed = confirmed
    return result


def _release(twin: Twin, gen_ids: list[int], draining: list[int]) -> None:
    """Backend.release: a draining backend confirms later (StepResult.freed)."""
    if twin.life.confirm_frees:
        draining.extend(gen_ids)
    else:
        twin.freed(gen_ids)


def replay(life: Life) -> dict[str, int]:
    """Run `life` through both schedulers; what happened, counted (to show it was covered)."""
    rng = random.Random(life.seed)
    twin = Twin(life)
    seen = dict.fromkeys(["admitted", "refused", "released", "idle", "parked_idle", "ahead",
                          "finished", "frames", "waiting", "full", "parked", "deferred",
                          "queued", "rejected", "too long", "cut"], 0)
    segments: dict[str, int] = {}  # session -> its last segment so far
    names = [f"s{i}" for i in range(life.sessions)]  # each client's current session
    now, next_id, ahead, draining = 0.0, 1, None, []
    for step in range(life.steps):
        if step in life.swaps:
            twin.swap(life.swaps[step])
        # mostly a step's time; now and then a pause that lets buffers run dry
        pause = rng.random()
        now += 2.0 if pause < 0.005 else 0.3 if pause < 0.02 else rng.choice(
            [0.0, 0.0005, 0.001, 0.002, 0.005, 0.01])
        if rng.random() < life.arrival_p:  # a session's next segments (a new one: its first)
            client = rng.randrange(life.sessions)
            sid = names[client]
            if segments.get(sid, -1) + 1 >= life.max_segments:  # done: the client's next one
                sid = names[client] = f"{sid}+"
            if sid not in segments:
                twin.session_ids.append(sid)
            for _ in range(rng.choice([1, 1, 2, 3])):
                seg = segments.get(sid, -1) + 1
                if seg >= life.max_segments:
                    break
                segments[sid] = seg
                req = GenerationRequest(
                    sid, seg, tuple(range(rng.choice(life.prompt_lens))),
                    rng.choice([7, 70, 140, 700]), SamplingParams(seed=next_id),
                    expected_frames=rng.randrange(0, 60))
                outcome = twin.add(next_id, req, now)
                seen[outcome] += 1
                if outcome == "queued":  # a budget the slot cannot hold: cut to fit
                    seen["cut"] += req.max_tokens > life.max_seq_len - len(req.prompt_ids)
                next_id += 1
        if next_id > 1 and rng.random() < life.cancel_p:
            live = [g for g, _ in twin.gens.values() if not g.finished]
            if live and rng.random() < 0.7:  # running or waiting
                twin.cancel(rng.choice(live).gen_id, now)
            else:  # any: ended, refused or unknown too
                twin.cancel(rng.randrange(1, next_id + 1), now)
        if ahead is not None:
            plans, ahead = ahead, None
        else:
            plans = twin.schedule(now)
            plan = plans[0]
            seen["admitted"] += len(plan.admitted)
            seen["refused"] += len(plan.refused)
            seen["released"] += len(plan.released)
            _release(twin, [g.gen_id for g in plan.released], draining)
            if plan.empty and not twin.old.pool.num_draining:
                seen["idle"] += 1
                if plan.idle_s > 0:
                    seen["parked_idle"] += 1
                    if rng.random() < 0.5:
                        now += plan.idle_s  # the engine waits exactly that long
                twin.check(now, rng, everything=step % 50 == 0)
                continue
        if life.runs_ahead and not plans[0].empty:
            ahead = twin.schedule_ahead(plans, now)
            seen["ahead"] += ahead is not None
        result = _result(rng, plans[0], life, draining)
        now += rng.choice([0.0, 0.001, 0.012])
        outcomes = twin.update(plans, result, now)
        seen["frames"] += len(outcomes[0].frames)
        seen["finished"] += len(outcomes[0].finished)
        _release(twin, [g.gen_id for g in outcomes[0].finished], draining)
        stats = twin.old.stats()
        seen["waiting"] += stats.waiting > 0
        seen["full"] += stats.free_slots == 0
        seen["parked"] += bool(twin.old._parked)  # the frozen one's insides: what was reached
        seen["deferred"] += bool(twin.old._deferred_ids)
        twin.check(now, rng, everything=step % 50 == 0)
    twin.check(now, rng, everything=True)
    return seen


@pytest.mark.parametrize("name", list(LIVES))
def test_the_split_scheduler_decides_as_the_old_one_did(name):
    life = LIVES[name]
    seen = replay(life)
    # the life reached what it is about (else a pass would prove little)
    for what in ("admitted", "frames", "finished", "waiting"):
        assert seen[what] > 20, (what, seen)
    for what in life.expect:
        assert seen[what] > 0, (what, seen)
