"""The admission queue on its own (core/admission.py): the cap on new sessions, who takes the
free slots, deferral of later segments by slack, the budget's room, refusals of the newest."""

import pytest

from orpheus_svc.core.admission import AdmissionError, AdmissionQueue
from orpheus_svc.core.budget import MIN_SLACK_S

from .sched_helpers import make_gen


def _slack_key(slacks):
    """A batch order's key: (2, slack) for the gens named in `slacks` (slack falls by one
    second per second from time 0), (1, arrival) for the others (their listener waits)."""
    def key(gen, now):
        if gen.gen_id in slacks:
            return (2, slacks[gen.gen_id] - now)
        return (1, gen.arrival)
    return key


def _never(gen, now):
    raise AssertionError("no key is needed")


def test_the_cap_counts_only_new_sessions_beyond_the_free_slots():
    q = AdmissionQueue(num_slots=2)
    for _ in range(3):  # two take the free slots at the next admission, one waits
        q.add(make_gen(), free=2, max_waiting=1)
    with pytest.raises(AdmissionError) as exc:
        q.add(make_gen(), free=2, max_waiting=1)
    assert "all 2 KV slots" in str(exc.value) and "1 new sessions wait" in str(exc.value)
    assert "engine.max_waiting=1" in str(exc.value)
    q.add(make_gen(segment=1), free=2, max_waiting=1)  # a later segment is never refused
    assert len(q) == 4


def test_free_slots_go_in_key_order_and_the_rest_wait():
    q = AdmissionQueue(num_slots=4)
    gens = [make_gen(arrival=t) for t in (3.0, 1.0, 2.0)]
    for g in gens:
        q.add(g, free=0, max_waiting=8)
    admitted, refused = q.admit(5.0, free=2, room=float("inf"), key=_slack_key({}),
                                max_waiting=8)
    assert admitted == [gens[1], gens[2]] and refused == []
    assert len(q) == 1 and q.has_waiting and q.get(gens[0].gen_id) is gens[0]
    assert q.get(gens[1].gen_id) is None


def test_no_free_slot_leaves_the_queue_untouched():
    q = AdmissionQueue(num_slots=1)
    q.add(make_gen(), free=0, max_waiting=8)
    assert q.admit(0.0, free=0, room=5, key=_never, max_waiting=8) == ([], [])
    assert len(q) == 1 and q.has_waiting


def test_a_later_segment_with_audio_ahead_waits_until_its_slack_reaches_min_slack():
    q = AdmissionQueue(num_slots=4)
    later = make_gen(segment=1)
    q.add(later, free=4, max_waiting=8)
    key = _slack_key({later.gen_id: 5.0})
    assert q.admit(0.0, free=4, room=0, key=key, max_waiting=8) == ([], [])
    assert q.num_deferred == 1 and not q.has_waiting and len(q) == 1
    assert q.next_due() == 5.0 - MIN_SLACK_S
    assert q.admit(3.9, free=4, room=0, key=key, max_waiting=8) == ([], [])
    admitted, _ = q.admit(4.0, free=4, room=0, key=key, max_waiting=8)  # due: over the budget
    assert admitted == [later] and len(q) == 0 and q.next_due() == float("inf")


def test_budget_room_admits_deferred_ones_least_slack_first():
    q = AdmissionQueue(num_slots=8)
    gens = [make_gen(segment=1) for _ in range(3)]
    for g in gens:
        q.add(g, free=8, max_waiting=8)
    key = _slack_key({gens[0].gen_id: 5.0, gens[1].gen_id: 3.0, gens[2].gen_id: 8.0})
    admitted, _ = q.admit(0.0, free=8, room=2, key=key, max_waiting=8)
    assert admitted == [gens[1], gens[0]] and q.num_deferred == 1
    admitted, _ = q.admit(0.0, free=1, room=1, key=key, max_waiting=8)
    assert admitted == [gens[2]]


def test_a_cancelled_generation_leaves_the_queue_and_frees_its_place_under_the_cap():
    q = AdmissionQueue(num_slots=1)
    waiting, deferred = make_gen(session="a"), make_gen(session="b", segment=1)
    q.add(deferred, free=1, max_waiting=1)
    q.admit(0.0, free=1, room=0, key=_slack_key({deferred.gen_id: 9.0}), max_waiting=1)
    q.add(waiting, free=0, max_waiting=1)
    assert q.num_deferred == 1 and q.get(deferred.gen_id) is deferred
    assert q.remove(deferred.gen_id) is deferred and q.num_deferred == 0
    assert q.remove(deferred.gen_id) is None and q.get(deferred.gen_id) is None
    with pytest.raises(AdmissionError):
        q.add(make_gen(), free=0, max_waiting=1)  # `waiting` holds the one place
    assert q.remove(waiting.gen_id) is waiting and len(q) == 0
    q.add(make_gen(), free=0, max_waiting=1)  # its place is free again


def test_judged_again_a_deferred_segment_is_keyed_afresh_at_the_next_admission():
    q = AdmissionQueue(num_slots=2)
    later = make_gen(segment=1)
    q.add(later, free=2, max_waiting=8)
    q.admit(0.0, free=2, room=0, key=_slack_key({later.gen_id: 9.0}), max_waiting=8)
    q.judge_again(later)  # the segment before it ended early: its slack dropped
    assert q.has_waiting and q.num_deferred == 0 and q.next_due() == float("inf")
    admitted, _ = q.admit(0.1, free=2, room=0, key=_slack_key({}), max_waiting=8)
    assert admitted == [later]


def test_later_segments_taking_the_slots_new_sessions_were_counted_for_refuse_the_newest():
    q = AdmissionQueue(num_slots=1)
    a, b = make_gen(session="a", arrival=1.0), make_gen(session="b", arrival=2.0)
    q.add(a, free=1, max_waiting=1)
    q.add(b, free=1, max_waiting=1)  # one of the two takes the free slot: one waits
    later = make_gen(session="c", segment=1, arrival=0.5)
    q.add(later, free=1, max_waiting=1)
    admitted, refused = q.admit(3.0, free=1, room=float("inf"), key=_slack_key({}),
                                max_waiting=1)
    assert admitted == [later]  # its listener waits longest
    assert refused == [b]  # two new sessions would wait, one more than the cap: the newest
    assert len(q) == 1 and q.get(a.gen_id) is a
