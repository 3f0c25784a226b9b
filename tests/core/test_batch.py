"""core/batch.py: the batch arrays follow the audio grammar exactly as FrameParser does, and
the scheduler's batch path (decode_tokens) and by-id path (tokens) agree."""

import random

import numpy as np
import pytest

from orpheus_svc.core.batch import ERROR, LENGTH, STOP, BatchState
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.grammar import AudioGrammarError, FrameParser
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.step import DecodeRows, StepPlan, StepResult
from orpheus_svc.core.tokens import AUDIO_BASE, END_OF_SPEECH_ID, audio_token_id

from .gen_helpers import feed
from .sched_helpers import legal_token, make_gen, make_scheduler


def _token(rng: random.Random, parser: FrameParser) -> int:
    """Mostly legal tokens, sometimes the stop id (legal or not) or a token from the wrong
    position, outside the audio range, or 'code 4096'."""
    r = rng.random()
    if r < 0.06:
        return END_OF_SPEECH_ID
    if r < 0.08:
        return audio_token_id((parser.position + rng.randrange(1, 7)) % 7, rng.randrange(4096))
    if r < 0.09:
        return rng.choice([0, 128000, AUDIO_BASE - 1, AUDIO_BASE + 7 * 4096,
                           AUDIO_BASE + parser.position * 4096 + 4096])
    return audio_token_id(parser.position, rng.randrange(4096))


@pytest.mark.parametrize("seed", range(5))
def test_rows_follow_the_frame_parser_token_for_token(seed):
    rng = random.Random(seed)
    n = 40
    batch = BatchState(n)
    parsers, gens, counts, limits, live = {}, {}, {}, {}, set()
    for slot in range(n):
        g = make_gen(max_tokens=rng.randrange(1, 60))
        g.attach(batch, slot)
        parsers[slot], gens[slot], counts[slot] = FrameParser(), g, 0
        limits[slot] = g.request.max_tokens
        live.add(slot)
    while live:
        slots = sorted(rng.sample(sorted(live), rng.randrange(1, len(live) + 1)))
        tokens = [_token(rng, parsers[s]) for s in slots]
        adv = batch.advance(np.array(slots, np.int64), np.array(tokens, np.int64))
        complete = dict(zip(np.asarray(slots)[adv.complete].tolist(), adv.codes.tolist()))
        ended = dict(zip(np.asarray(slots)[adv.ended].tolist(), adv.reasons.tolist()))
        for slot, tok in zip(slots, tokens):
            counts[slot] += 1
            try:
                frame, stopped = parsers[slot].feed_one(tok), parsers[slot].stopped
                want = STOP if stopped else LENGTH if counts[slot] >= limits[slot] else 0
            except AudioGrammarError:
                frame, want = None, ERROR
            assert complete.get(slot) == (None if frame is None else list(frame))
            assert ended.get(slot, 0) == want
            g, p = gens[slot], parsers[slot]
            assert (g.num_generated, g.last_token) == (counts[slot], tok)
            if want != ERROR:
                assert (g.frame_position, g.stop_allowed) == (p.position, p.stop_allowed)
            if want:
                live.discard(slot)


def test_a_detached_generation_keeps_its_counters_and_frees_the_row():
    batch = BatchState(2)
    g = make_gen()
    g.attach(batch, 1)
    toks = [audio_token_id(i % 7, i) for i in range(9)]
    for t in toks:
        batch.advance(np.array([1]), np.array([t]))
    g.detach()
    assert (g.num_generated, g.last_token, g.frame_position) == (9, toks[-1], 2)
    assert g.parser.frames == 1 and g.parser._pending == [7, 8]
    assert batch.decode_slots().tolist() == [] and batch.gen_id[1] == -1


def test_decode_rows_are_read_only_copies():
    batch = BatchState(4)
    gens = [make_gen(prompt_len=5) for _ in range(3)]
    for slot, g in enumerate(gens):
        g.attach(batch, slot)
        feed(g, [audio_token_id(0, slot)])
    rows = batch.rows(batch.decode_slots())
    assert rows.gen_ids.tolist() == [g.gen_id for g in gens]
    assert rows.position.tolist() == [5, 5, 5] and rows.frame_position.tolist() == [1, 1, 1]
    with pytest.raises(ValueError):
        rows.num_generated[0] = 7
    with pytest.raises(AttributeError):
        rows.slots = np.zeros(3)
    feed(gens[0], [audio_token_id(1, 0)])
    assert rows.num_generated.tolist() == [1, 1, 1]  # the snapshot did not move
    assert [r.gen_id for r in rows] == rows.gen_ids.tolist()
    assert rows == DecodeRows.from_rows(rows.rows)
    assert all(r == g.row()._replace(num_generated=1, position=5, frame_position=1,
                                     stop_allowed=False, last_token=r.last_token)
               for r, g in zip(rows, gens))


def _drive(by_id: bool, seed: int):
    """Run a random load through the scheduler with tokens handed over either way."""
    rng = random.Random(seed)
    s = make_scheduler(slots=16, batch=16, waiting=64)
    gens = [Generation(gen_id=i + 1, request=GenerationRequest(
        f"s{i % 5}", i // 5, tuple(range(8)), rng.randrange(8, 80)), arrival=0.0, seed=i)
        for i in range(30)]
    log = []
    for g in gens:
        s.add(g)
    for step in range(400):
        plan = s.schedule(step * 0.01)
        stop = {r.gen_id for r in plan.rows if rng.random() < 0.05}
        toks = {r.gen_id: legal_token(r, r.gen_id in stop) for r in plan.rows}
        if rng.random() < 0.02 and plan.rows:  # now and then a token the grammar forbids
            toks[plan.rows[0].gen_id] = 0
        if by_id:
            result = StepResult(tokens={k: [v] for k, v in toks.items()})
        else:
            result = StepResult(tokens={r.gen_id: [toks[r.gen_id]] for r in plan.prefill},
                                decode_tokens=np.array([toks[g] for g in
                                                        plan.decode.gen_ids.tolist()]))
        out = s.update(plan, result, step * 0.01)
        log.append((sorted((g.gen_id, c.tolist()) for g, c in out.frames),
                    sorted((g.gen_id, g.finish_reason) for g in out.finished)))
        if not s.has_work:
            break
    return log, [(g.num_generated, g.num_frames, g.finish_reason) for g in gens], s.stats()


@pytest.mark.parametrize("seed", range(3))
def test_the_batch_path_and_the_by_id_path_agree(seed):
    assert _drive(True, seed) == _drive(False, seed)


def test_plans_built_from_rows_and_from_the_batch_are_the_same():
    s = make_scheduler()
    g = make_gen()
    s.add(g)
    plan = s.schedule(0.0)
    s.update(plan, StepResult({g.gen_id: [legal_token(g)]}), 0.0)
    plan = s.schedule(0.0)
    assert isinstance(plan.decode, DecodeRows)
    assert plan == StepPlan(plan.step, (), (g.row(),), plan.admitted, plan.released)
    assert plan.num_rows == 1 and plan.rows == (g.row(),)


def test_a_generation_fed_by_hand_counts_the_token_that_breaks_the_grammar():
    g = Generation(gen_id=1, request=GenerationRequest("s", 0, (1, 2), 50), arrival=0.0,
                   seed=1)
    with pytest.raises(AudioGrammarError):
        feed(g, [audio_token_id(0, 1), audio_token_id(0, 1)])
    assert g.num_generated == 2 and g.frame_position == 1


def test_rows_in_flight_are_the_rows_one_token_later_less_those_it_ends():
    batch = BatchState(3)
    frame = [audio_token_id(p, 5) for p in range(7)]
    for slot, (max_tokens, fed) in enumerate([(50, 6), (50, 3), (5, 4)]):
        g = make_gen(max_tokens=max_tokens)
        g.attach(batch, slot)
        batch.advance(np.array([slot], np.int64), np.array([frame[0]], np.int64))
        for tok in frame[1:fed]:
            batch.advance(np.array([slot], np.int64), np.array([tok], np.int64))
    slots = np.arange(3, dtype=np.int64)
    now, ahead = batch.rows(slots), batch.rows(slots, np.ones(3, bool))  # all in flight
    assert now.num_generated.tolist() == [6, 3, 4]
    assert ahead.slots.tolist() == [0, 1]  # slot 2's next token is its 5th and last
    assert ahead.num_generated.tolist() == [7, 4]
    assert ahead.frame_position.tolist() == [0, 4]  # slot 0 completes its first frame
    assert ahead.stop_allowed.tolist() == [True, False]
    assert ahead.last_token.tolist() == [-1, -1]
    assert (ahead.position - now.position[:2]).tolist() == [1, 1]
    # only slot 1 in flight: the others are given as they are
    mixed = batch.rows(slots, np.array([False, True, False]))
    assert mixed.slots.tolist() == [0, 1, 2]
    assert mixed.num_generated.tolist() == [6, 4, 4]
    assert mixed.frame_position.tolist() == [6, 4, 4]
    assert mixed.last_token.tolist()[1] == -1 and -1 not in (mixed.last_token[[0, 2]]).tolist()


def test_a_row_that_sampled_nothing_reads_back_no_last_token():
    batch = BatchState(2)
    g = make_gen()
    g.attach(batch, 1)
    assert batch.read(1).last_token is None and g.last_token is None
    assert batch.detach(1).last_token is None
