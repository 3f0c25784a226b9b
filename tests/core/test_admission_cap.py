"""The admission queue's cap (engine.max_waiting) is exact: it counts new sessions (first
segments) that wait for a KV slot, and a refusal says how many wait, never more than the cap.

Issue 29 item 3: a refusal read "all 32 KV slots are busy and 66 generations are queued
(max_waiting=64)". Two things let 66 past 64: the generations drained between a step that
freed slots and the next admission were counted with those free slots (their refusal then
counted every one and called every slot busy), and later segments of accepted sessions,
which are never refused, filled the same count."""

import random
import re

import pytest

from orpheus_svc.core.admission import AdmissionError

from .sched_helpers import make_gen, make_scheduler, run_step


def _queued(exc) -> int:
    return int(re.search(r"(\d+) new sessions wait", str(exc.value)).group(1))


def _first_without_slot(s, gens) -> int:
    return sum(1 for g in gens if g.request.segment_index == 0 and g.slot is None
               and not g.finished)


def test_a_refusal_counts_only_the_sessions_the_free_slots_cannot_take():
    s = make_scheduler(slots=4, waiting=8)
    running = [make_gen(session=f"r{i}", max_tokens=7) for i in range(4)]
    for g in running:
        s.add(g)
    run_step(s, 0.0)
    for i in range(8):
        s.add(make_gen(session=f"w{i}", arrival=1.0))
    now = 2.0
    while not running[0].finished:  # the four running ones end: their slots are free
        run_step(s, now)
        now += 0.01
    assert s.stats().free_slots == 4 and s.stats().waiting == 8
    for i in range(4):  # these take the four free slots at the next step: not queued
        s.add(make_gen(session=f"x{i}", arrival=now))
    with pytest.raises(AdmissionError) as exc:
        s.add(make_gen(session="y", arrival=now))
    assert _queued(exc) == 8 and "max_waiting=8" in str(exc.value)
    s.schedule(now)
    assert s.stats().waiting == 8 and s.stats().free_slots == 0


def test_later_segments_wait_outside_the_cap_and_are_never_refused():
    s = make_scheduler(slots=1, waiting=2)
    s.add(make_gen(session="a", segment=0))
    s.schedule(0.0)
    for seg in range(1, 4):
        s.add(make_gen(session="a", segment=seg))  # the accepted session's next segments
    s.add(make_gen(session="b"))
    s.add(make_gen(session="c"))  # two new sessions wait: the cap, whatever else waits
    with pytest.raises(AdmissionError) as exc:
        s.add(make_gen(session="d"))
    assert _queued(exc) == 2
    assert s.stats().waiting == 5 and s.stats().rejected == 1


def test_a_later_segment_that_takes_the_free_slot_first_turns_the_newest_session_away():
    """The free slot a new session was counted against goes to a later segment whose
    listener is waiting (it arrived first): the newest session is refused at that step,
    so no more than max_waiting new sessions ever wait."""
    s = make_scheduler(slots=1, waiting=1)
    a0 = make_gen(session="a", segment=0, arrival=0.0, max_tokens=7)
    s.add(a0)
    s.schedule(0.0)
    a1 = make_gen(session="a", segment=1, arrival=0.1)
    s.add(a1)
    b = make_gen(session="b", arrival=0.2)
    s.add(b)
    now = 0.3
    while not a0.finished:  # one frame, then the slot is free; a's listener plays it
        run_step(s, now)
    now += 5.0  # a's audio has played: a1's listener waits, and a1 came before b and c
    c = make_gen(session="c", arrival=now)
    s.add(c)  # counted against the free slot
    plan = s.schedule(now)
    assert [g for g, _ in plan.refused] == [c]
    assert "1 new sessions wait" in plan.refused[0][1]
    assert a1.slot is not None and b.slot is None and c.finish_reason is None
    st = s.stats()
    assert st.waiting == 1 and st.rejected == 1
    assert st.submitted == st.finished + st.cancelled + st.active + st.waiting


@pytest.mark.parametrize("seed", range(4))
def test_random_admission_never_lets_more_new_sessions_wait_than_the_cap(seed):
    """Bursts of submits (new sessions, and later segments of the accepted ones) between
    steps, random ends and cancels: after every add and every step, the new sessions
    without a slot beyond the free slots never exceed the cap; after a step that leaves
    no slot free, the new sessions without one never do; every refusal reports exactly
    the cap; only first segments are refused; no slot leaks."""
    rng = random.Random(seed)
    cap, slots = 3, 4
    s = make_scheduler(slots=slots, batch=4, waiting=cap)
    gens, accepted, now, nxt = [], [], 0.0, 0

    def check():
        st = s.stats()
        assert _first_without_slot(s, gens) - st.free_slots <= cap
        assert st.used_slots + st.free_slots == slots

    for _ in range(400):
        for _ in range(rng.randrange(6)):  # a burst of submits drained before one step
            if accepted and rng.random() < 0.4:
                sid, seg = rng.choice(accepted)
                g = make_gen(session=sid, segment=seg + 1, arrival=now,
                             max_tokens=7 * rng.randint(1, 3))
                accepted[accepted.index((sid, seg))] = (sid, seg + 1)
            else:
                nxt += 1
                g = make_gen(session=f"s{nxt}", arrival=now, max_tokens=7 * rng.randint(1, 3))
            try:
                s.add(g)
            except AdmissionError as exc:
                assert g.request.segment_index == 0
                assert int(re.search(r"(\d+) new sessions wait", str(exc)).group(1)) == cap
            else:
                gens.append(g)
                if g.request.segment_index == 0:
                    accepted.append((g.request.session_id, 0))
            check()
        if rng.random() < 0.2 and gens:
            s.cancel(rng.choice(gens).gen_id, now)
        plan, _ = run_step(s, now, stop_ids={g.gen_id for g in gens if rng.random() < 0.2})
        for g, reason in plan.refused:
            assert g.request.segment_index == 0 and f"{cap} new sessions wait" in reason
            gens.remove(g)
            accepted = [a for a in accepted if a[0] != g.request.session_id]
        check()
        if s.stats().free_slots == 0:
            assert _first_without_slot(s, gens) <= cap
        gens = [g for g in gens if not g.finished]
        now += rng.choice((0.001, 0.01, 0.5))
    for g in gens:
        s.cancel(g.gen_id, now)
    s.schedule(now)
    st = s.stats()
    assert st.free_slots == slots and st.waiting == 0 and st.active == 0
    assert st.submitted == st.finished + st.cancelled
