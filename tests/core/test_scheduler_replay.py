"""Every decision the scheduler makes in sixteen seeded lives, against a record of them.

Each life below is seeded-random: sessions arrive with several segments each, steps run
(some planned ahead of their tokens, as the graph engine does), tokens come back legal,
stopping, breaking the grammar, several at once, or failing; clients cancel; a backend that
drains confirms its ends late; settings are swapped on a live scheduler. replay() drives
core/scheduler.py's Scheduler through a life and hands every answer, as plain JSON values,
to an observer. The test's observer compares each with the record of that life,
tests/core/scheduler_lives/<life>.jsonl.gz (one JSON line per step once decompressed), and
fails at the first step that differs, naming the life, the step and what differs.

Where the records come from. Until issue 44 this test fed each life both to today's
Scheduler and to a frozen copy of the scheduler as it was before issue 38 split it by
concern (tests/unit/legacy_scheduler.py, 717 lines, deleted by issue 44: `git show
de3b2a0:tests/unit/legacy_scheduler.py`), and compared their answers live. The records were
made once from that frozen copy at commit de3b2a0, where the live comparison passed:

    .venv/bin/python -m tests.core.record_scheduler_lives --legacy de3b2a0

Recorded from today's Scheduler at that commit they are the same, step for step. After a
change of behaviour made on purpose, regenerate them from today's Scheduler and read the
diff before committing it (tests/core/record_scheduler_lives.py says how):

    .venv/bin/python -m tests.core.record_scheduler_lives [LIFE ...]

Which steps ran ahead is part of a life's script, not of what it checks: the frozen
scheduler planned a step ahead only when nothing waited, was cancelled, drained or parked
(schedule_ahead, else None); today's plans one whatever joins or leaves (schedule with the
step in flight, issue 32 item 2). So each record keeps the steps where the frozen one ran
ahead (`ahead_steps`, in its first line); the replay plans ahead exactly there and, where the
frozen one declined, goes on as it did (the step after is planned once the tokens are
known). Regenerating keeps those steps. The steps today's scheduler runs ahead of the
frozen one are checked in tests/core/test_scheduler_in_flight.py.

The live comparison's checks, and which test holds each now. All but the last are
test_the_scheduler_decides_as_recorded, on the same lives with the same calls and the same
random draws (so the same counts of what happened) as the live comparison, and one more
life ("aging"); in its record each is a key of a step's line, named here in quotes:

    add() of each new segment: queued, or the AdmissionError's message (the waiting cap);
        a prompt the slot cannot hold raises PromptTooLong ("add")
    cancel(): the generation it returns and its finish reason, or None ("cancel")
    schedule(): each StepPlan whole: its step number, the prefill rows and the decode rows
        in order, each row field for field (gen_id, slot, its request, seed, prefill,
        num_generated, last_token, position, frame_position, stop_allowed; the requests
        interned: "rq" gives each the first time one is seen), admitted, released, refused
        with the message, idle_s ("plan")
    the step planned ahead (the frozen scheduler's schedule_ahead; today's schedule with
        the step in flight) where the frozen one planned one: the same fields ("ahead")
    update(): the outcome's frames (gen_id and the codes) and ends (gen_id and finish
        reason); after it each frame's playout_update(gen, now).starts_at (or None), then
        playout_moved(now) as (gen_id, starts_at) ("out")
    after every step, idle ones too, and once after the last: every counter of
        stats(now); has_work; running() in order; the pool's free and draining slots;
        get() of a random gen id (ended, refused, unknown and past-the-end ones too) and
        buffered_seconds() of a random session ("chk"; stored as what changed since the
        step before)
    every 50 steps and after the last: every generation's own state, slot, num_frames,
        cancelled, finish_reason, steps_waited, frames_not_in_playout, num_generated,
        last_token and its request with max_tokens fitted to the slot ("all"; stored as
        the generations that changed since the snapshot before)
    that each life reaches what it is about, else a pass proves little (admissions, frames,
        ends and a queue more than 20 times; per life its `expect`): the counts are in the
        record's first line ("seen"; "parked" and "deferred" were read from the frozen
        scheduler's insides) and asserted there by test_the_scheduler_decides_as_recorded,
        and the replay's own counts, all but those two, must equal them; that every life
        has a record and nothing else is one: test_every_life_has_its_record
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.prompt import PromptTooLong, fit_to_slot
from orpheus_svc.core.admission import AdmissionError
from orpheus_svc.core.scheduler import Scheduler
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.slots import SlotPool
from orpheus_svc.core.step import StepResult
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS, audio_token_id

RECORDS = Path(__file__).with_name("scheduler_lives")


# -- the answers as JSON values --------------------------------------------------------


def _plain(value):
    """A request (or any frozen dataclass of plain values) as JSON: dataclasses as lists of
    their fields in order, tuples as lists, a prompt 0, 1, .. n-1 as {"range": n}."""
    if dataclasses.is_dataclass(value):
        return [_plain(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, tuple):
        if value == tuple(range(len(value))):
            return {"range": len(value)}
        return [_plain(v) for v in value]
    return value


def _gen_key(gen: Generation | None):
    return None if gen is None else [gen.gen_id, gen.finish_reason]


class Observer:
    """Takes replay()'s answers, step by step (step(), then put() per answer). It interns the
    requests that rows and generations carry: each distinct one gets the next index when
    first seen, given with the answer that first carries it ("rq": [[index, request]])."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._by_id: dict[int, tuple[GenerationRequest, int]] = {}
        self._new: list = []

    def step(self, step: int | str) -> None:
        raise NotImplementedError

    def put(self, key: str, value) -> None:
        raise NotImplementedError

    def request(self, req: GenerationRequest) -> int:
        known = self._by_id.get(id(req))
        if known is not None and known[0] is req:
            return known[1]
        plain = _plain(req)
        text = json.dumps(plain)
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self._index)
            self._new.append([index, plain])
        self._by_id[id(req)] = (req, index)
        return index

    def new_requests(self, out: dict) -> dict:
        if self._new:
            out["rq"], self._new = self._new, []
        return out

    def row(self, r) -> list:
        return [r.gen_id, r.slot, self.request(r.request), r.seed, int(r.prefill),
                r.num_generated, r.last_token, r.position, r.frame_position,
                int(r.stop_allowed)]

    def plan(self, plan) -> dict:
        out: dict = {"step": plan.step}
        if plan.prefill:
            out["p"] = [self.row(r) for r in plan.prefill]
        if len(plan.decode):
            out["d"] = [self.row(r) for r in plan.decode.rows]
        if plan.admitted:
            out["adm"] = [g.gen_id for g in plan.admitted]
        if plan.released:
            out["rel"] = [g.gen_id for g in plan.released]
        if plan.idle_s:
            out["idle"] = plan.idle_s
        if plan.refused:
            out["ref"] = [[g.gen_id, why] for g, why in plan.refused]
        return self.new_requests(out)

    def state(self, gen: Generation, max_seq_len: int) -> list:
        # The frozen scheduler cut max_tokens to the slot at admission, today's when it
        # queues: the requests are compared as fitted (fitting twice changes nothing). The
        # plans' rows carry the requests as the backend gets them, compared as they are.
        req = gen.request
        budget = fit_to_slot(len(req.prompt_ids), req.max_tokens, max_seq_len)
        if budget != req.max_tokens:
            req = dataclasses.replace(req, max_tokens=budget)
        return [gen.slot, gen.num_frames, int(gen.cancelled), gen.finish_reason,
                gen.steps_waited, gen.frames_not_in_playout, gen.num_generated,
                gen.last_token, self.request(req)]


class Checker(Observer):
    """Compares each answer with the record; the first that differs fails the test."""

    def __init__(self, name: str, steps: list[dict]) -> None:
        super().__init__()
        self.name, self._steps, self._at = name, iter(steps), None
        self._expected: dict = {}

    def step(self, step) -> None:
        self._done()
        self._expected = next(self._steps)
        self._at = self._expected.pop("s")
        assert self._at == step, (self.name, step, self._at)

    def put(self, key: str, value) -> None:
        expected = self._expected.pop(key, "(nothing)")
        if value != expected:
            pytest.fail(f"life {self.name!r}, step {self._at}: {key} differs from the record"
                        f"\n  recorded: {json.dumps(expected)}\n  now:      {json.dumps(value)}"
                        f"{_diff(expected, value)}", pytrace=False)

    def _done(self) -> None:
        if self._expected:
            pytest.fail(f"life {self.name!r}, step {self._at}: the record has "
                        f"{sorted(self._expected)} too, the replay gave none", pytrace=False)

    def finish(self) -> None:
        self._done()
        rest = next(self._steps, None)
        assert rest is None, (self.name, "the record goes on", rest)


def _diff(expected, value) -> str:
    if isinstance(expected, dict) and isinstance(value, dict):
        keys = [k for k in {**expected, **value} if expected.get(k) != value.get(k)]
        return "".join(f"\n  {k}: recorded {json.dumps(expected.get(k))}, "
                       f"now {json.dumps(value.get(k))}" for k in keys)
    return ""


# The answers stored as changes: "chk" (after every step) against the one before, its "st"
# (the stats) field by field; "all" (every 50 steps) generation by generation.
def encode_changes(steps: list[dict]) -> list[dict]:
    out, chk, gens = [], {}, {}
    for line in steps:
        line = dict(line)
        if "chk" in line:
            new = line["chk"]
            delta = {k: v for k, v in new.items()
                     if k in ("get", "buf") or (k != "st" and chk.get(k, object()) != v)}
            st = {k: v for k, v in new["st"].items() if chk.get("st", {}).get(k) != v}
            if st:
                delta["st"] = st
            line["chk"], chk = delta, new
        if "all" in line:
            new = line["all"]
            delta = {k: v for k, v in new["gens"].items() if gens.get(k) != v}
            line["all"] = {**({"rq": new["rq"]} if "rq" in new else {}), "gens": delta}
            gens = new["gens"]
        out.append(line)
    return out


def decode_changes(steps: list[dict]) -> list[dict]:
    chk: dict = {"st": {}}
    gens: dict = {}
    for line in steps:
        if "chk" in line:
            delta = line["chk"]
            full = {k: v for k, v in chk.items() if k not in ("get", "buf")}
            full.update({k: v for k, v in delta.items() if k != "st"})
            full["st"] = {**chk["st"], **delta.get("st", {})}
            line["chk"] = chk = full
        if "all" in line:
            gens = {**gens, **line["all"]["gens"]}
            line["all"] = {**line["all"], "gens": gens}
    return steps


def record_path(name: str) -> Path:
    return RECORDS / f"{name}.jsonl.gz"


def read_record(name: str) -> tuple[dict, list[dict]]:
    """The record's first line (the life's name, where it was recorded from, its run-ahead
    steps, its counts) and its steps, changes resolved."""
    with gzip.open(record_path(name), "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return lines[0], decode_changes(lines[1:])


# -- the life ------------------------------------------------------------------------------


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
    # more runnable than the batch holds, aged after two steps left out, so that aged ones
    # compete for the places: longest left out first (added by issue 44, recorded from the
    # frozen scheduler too; the aging order reversed changes no other life's decisions)
    "aging": Life(16, slots=12, sessions=12, arrival_p=0.1, expect=("full", "rejected"),
                  settings=dict(max_batch_size=3, max_waiting=8, aging_steps=2)),
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


def _release(sched, life: Life, gen_ids: list[int], draining: list[int]) -> None:
    """Backend.release: a draining backend confirms later (StepResult.freed)."""
    if life.confirm_frees:
        draining.extend(gen_ids)
    else:
        sched.freed(gen_ids)


def _submit(sched, gen: Generation) -> str:
    """add(): "queued", the AdmissionError's message (the waiting cap) or "too long"."""
    try:
        sched.add(gen)
    except PromptTooLong:
        return "too long"
    except AdmissionError as exc:
        return str(exc)
    return "queued"


def _check(sched, life: Life, obs: Observer, gens: dict[int, Generation], now: float,
           rng: random.Random, everything: bool) -> None:
    """The counters and queries; every generation's state when `everything`."""
    chk = {"st": dataclasses.asdict(sched.stats(now)), "work": sched.has_work,
           "run": [g.gen_id for g in sched.running()], "free": sched.pool.num_free,
           "drain": sched.pool.num_draining}
    if gens:
        gid = rng.randrange(1, len(gens) + 2)
        chk["get"] = [gid, _gen_key(sched.get(gid))]
        sid = f"s{rng.randrange(life.sessions)}"
        chk["buf"] = [sid, sched.buffered_seconds(sid, now)]
    obs.put("chk", chk)
    if everything:
        states = {str(g.gen_id): obs.state(g, life.max_seq_len) for g in gens.values()}
        obs.put("all", obs.new_requests({"gens": states}))


def replay(life: Life, sched, obs: Observer, ahead_steps: set[int] | None = None,
           insides: Callable | None = None) -> tuple[dict[str, int], list[int]]:
    """Run `life` through `sched` (today's Scheduler, or what has its calls), every answer
    to `obs`. With `life.runs_ahead`, a step is planned ahead at `ahead_steps` (None: at
    every step where `sched` plans one; the frozen scheduler declined some). Returns what
    happened, counted (to show it was covered; "parked" and "deferred" only with
    `insides`, which tells from a scheduler's insides whether any are), and the steps that
    ran ahead."""
    rng = random.Random(life.seed)
    seen = dict.fromkeys(["admitted", "refused", "released", "idle", "parked_idle", "ahead",
                          "finished", "frames", "waiting", "full", "parked", "deferred",
                          "queued", "rejected", "too long", "cut"], 0)
    if insides is None:
        del seen["parked"], seen["deferred"]
    gens: dict[int, Generation] = {}
    segments: dict[str, int] = {}  # session -> its last segment so far
    names = [f"s{i}" for i in range(life.sessions)]  # each client's current session
    now, next_id, ahead, draining, ran_ahead = 0.0, 1, None, [], []
    for step in range(life.steps):
        obs.step(step)
        if step in life.swaps:
            sched.settings = type(sched.settings)(**life.swaps[step])
        # mostly a step's time; now and then a pause that lets buffers run dry
        pause = rng.random()
        now += 2.0 if pause < 0.005 else 0.3 if pause < 0.02 else rng.choice(
            [0.0, 0.0005, 0.001, 0.002, 0.005, 0.01])
        if rng.random() < life.arrival_p:  # a session's next segments (a new one: its first)
            client = rng.randrange(life.sessions)
            sid = names[client]
            if segments.get(sid, -1) + 1 >= life.max_segments:  # done: the client's next one
                sid = names[client] = f"{sid}+"
            added = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                seg = segments.get(sid, -1) + 1
                if seg >= life.max_segments:
                    break
                segments[sid] = seg
                req = GenerationRequest(
                    sid, seg, tuple(range(rng.choice(life.prompt_lens))),
                    rng.choice([7, 70, 140, 700]), SamplingParams(seed=next_id),
                    expected_frames=rng.randrange(0, 60))
                gen = Generation(gen_id=next_id, request=req, arrival=now, seed=next_id)
                answer = _submit(sched, gen)
                added.append([next_id, answer])
                outcome = answer if answer in ("queued", "too long") else "rejected"
                seen[outcome] += 1
                if outcome != "too long":
                    gens[next_id] = gen
                if outcome == "queued":  # a budget the slot cannot hold: cut to fit
                    seen["cut"] += req.max_tokens > life.max_seq_len - len(req.prompt_ids)
                next_id += 1
            obs.put("add", added)
        if next_id > 1 and rng.random() < life.cancel_p:
            live = [g for g in gens.values() if not g.finished]
            if live and rng.random() < 0.7:  # running or waiting
                gid = rng.choice(live).gen_id
            else:  # any: ended, refused or unknown too
                gid = rng.randrange(1, next_id + 1)
            obs.put("cancel", [gid, _gen_key(sched.cancel(gid, now))])
        if ahead is not None:
            plan, ahead = ahead, None
        else:
            plan = sched.schedule(now)
            obs.put("plan", obs.plan(plan))
            seen["admitted"] += len(plan.admitted)
            seen["refused"] += len(plan.refused)
            seen["released"] += len(plan.released)
            _release(sched, life, [g.gen_id for g in plan.released], draining)
            if plan.empty and not sched.pool.num_draining:
                seen["idle"] += 1
                if plan.idle_s > 0:
                    seen["parked_idle"] += 1
                    if rng.random() < 0.5:
                        now += plan.idle_s  # the engine waits exactly that long
                _check(sched, life, obs, gens, now, rng, everything=step % 50 == 0)
                continue
        if life.runs_ahead and not plan.empty and (ahead_steps is None or step in ahead_steps):
            ahead = sched.schedule(now, in_flight=plan)  # None: the frozen one declined
            if ahead is not None:
                obs.put("ahead", obs.plan(ahead))
                ran_ahead.append(step)
                seen["ahead"] += 1
        result = _result(rng, plan, life, draining)
        now += rng.choice([0.0, 0.001, 0.012])
        out = sched.update(plan, result, now)
        answer: dict = {}
        # Today's update hands the snapshots out itself (StepOutput.pushes: one per
        # generation with frames, in their order, then the moved ones, not final); the
        # legacy scheduler's caller asked for them after the update, in the same order.
        pushes = getattr(out, "pushes", None)
        if out.frames:
            answer["f"] = [[g.gen_id, codes.tolist()] for g, codes in out.frames]
            snaps = ([sched.playout_update(g, now) for g, _ in out.frames] if pushes is None
                     else [p.playout for p in pushes[:len(out.frames)]])
            answer["po"] = [None if p is None else p.starts_at for p in snaps]
        if out.finished:
            answer["fin"] = [[g.gen_id, g.finish_reason] for g in out.finished]
        moved = ([[g.gen_id, p.starts_at] for g, p in sched.playout_moved(now)] if pushes is None
                 else [[p.gen_id, p.playout.starts_at] for p in pushes[len(out.frames):]
                       if not p.final])
        if moved:
            answer["mv"] = moved
        obs.put("out", answer)
        seen["frames"] += len(out.frames)
        seen["finished"] += len(out.finished)
        _release(sched, life, [g.gen_id for g in out.finished], draining)
        stats = sched.stats()
        seen["waiting"] += stats.waiting > 0
        seen["full"] += stats.free_slots == 0
        if insides is not None:
            parked, deferred = insides(sched)
            seen["parked"] += parked
            seen["deferred"] += deferred
        _check(sched, life, obs, gens, now, rng, everything=step % 50 == 0)
    obs.step("end")
    _check(sched, life, obs, gens, now, rng, everything=True)
    return seen, ran_ahead


def scheduler(life: Life) -> Scheduler:
    return Scheduler(SlotPool(life.slots, life.max_seq_len, confirm_frees=life.confirm_frees),
                     SchedulerSettings(**life.settings))


def test_every_life_has_its_record():
    assert sorted(p.name for p in RECORDS.glob("*.jsonl.gz")) == sorted(
        record_path(name).name for name in LIVES)


@pytest.mark.parametrize("name", list(LIVES))
def test_the_scheduler_decides_as_recorded(name):
    life = LIVES[name]
    head, steps = read_record(name)
    assert head["life"] == name
    # the life reached what it is about (else a pass would prove little)
    recorded = head["seen"]
    for what in ("admitted", "frames", "finished", "waiting"):
        assert recorded[what] > 20, (what, recorded)
    for what in life.expect:
        assert recorded[what] > 0, (what, recorded)
    obs = Checker(name, steps)
    seen, ran_ahead = replay(life, scheduler(life), obs, set(head["ahead_steps"]))
    obs.finish()
    assert ran_ahead == head["ahead_steps"]
    assert seen == {k: v for k, v in recorded.items() if k in seen}
