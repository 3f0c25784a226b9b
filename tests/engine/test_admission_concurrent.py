"""The admission cap under concurrent submits (issue 29 item 3): many threads open sessions
(a first segment, then a later one, as a session with two segments in flight does) against
a real EngineLoop; its thread drains their submits in bursts between steps. No stub of the
scheduler: the checks run on the engine thread, after every admission decision."""

import random
import re
import threading

from orpheus_svc.core.events import AudioEvent, Rejected
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import BackendCapabilities, StepResult
from orpheus_svc.core.tokens import audio_token_id
from orpheus_svc.engine.loop import EngineLoop

from .harness import Collector, RecordingFlusher

SLOTS, CAP = 4, 4


class _OneTokenPerRow:
    """A backend with no model: every row gets a legal audio token at once."""

    capabilities = BackendCapabilities(name="instant", num_slots=SLOTS, max_seq_len=256,
                                       retry_safe=True)

    def step(self, plan):
        return StepResult(tokens={r.gen_id: [audio_token_id(r.frame_position, r.gen_id % 4096)]
                                  for r in plan.rows})

    def release(self, gen_ids):
        return list(gen_ids)

    def close(self):
        pass


def _watch(core: EngineLoop, problems: list):
    """Check the cap on the engine thread after every add and every schedule."""
    sched = core._scheduler
    firsts = []  # accepted first segments, until they get a slot, end or are refused

    def check(when):
        firsts[:] = [g for g in firsts if g.slot is None and g.finish_reason is None]
        over = len(firsts) - sched.pool.num_free
        if over > CAP:
            problems.append(f"after {when}: {len(firsts)} new sessions wait with "
                            f"{sched.pool.num_free} slots free (cap {CAP})")

    add, schedule = sched.add, sched.schedule

    def checked_add(gen):
        add(gen)
        if gen.request.segment_index == 0:
            firsts.append(gen)
        check("add")

    def checked_schedule(now, in_flight=None):
        plan = schedule(now, in_flight)
        refused = {g.gen_id for g, _ in plan.refused}
        firsts[:] = [g for g in firsts if g.gen_id not in refused]
        check("schedule")
        return plan

    sched.add, sched.schedule = checked_add, checked_schedule


def test_concurrent_sessions_never_queue_more_new_sessions_than_the_cap():
    events = Collector()
    core = EngineLoop(_OneTokenPerRow(), RecordingFlusher(events), events,
                      settings=SchedulerSettings(max_batch_size=SLOTS, max_waiting=CAP), seed=1)
    problems: list[str] = []
    _watch(core, problems)
    core.start()
    outcomes = []

    def client(k):
        rng = random.Random(k)
        for burst in range(6):  # a few sessions at once, then wait for them all
            sessions = []
            for i in range(4):
                reqs = [GenerationRequest(session_id=f"c{k}-{burst}-{i}", segment_index=seg,
                                          prompt_ids=(1, 2, 3),
                                          max_tokens=7 * rng.randint(1, 4)) for seg in (0, 1)]
                sessions.append([core.submit(r) for r in reqs])
            for ids in sessions:
                events.wait_for(lambda ev: events.of(Rejected, ids[0])
                                or events.of(AudioEvent, ids[0]))
                if events.of(Rejected, ids[0]):
                    core.cancel(ids[1])  # the session was refused: its later segment goes too
            for ids in sessions:
                events.wait_for(lambda ev: events.ended(ids))
                outcomes.append(ids)

    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(outcomes) == 8 * 6 * 4
        events.wait_for(lambda ev: core.stats().active == 0 and core.stats().waiting == 0,
                        timeout=10)
    finally:
        core.stop()
    assert not problems, problems[:5]
    refused = events.of(Rejected)
    assert refused, "the load never reached the cap: the test proves nothing"
    later = {ids[1] for ids in outcomes}
    for ev in refused:
        assert ev.gen_id not in later, "a later segment of an accepted session was refused"
        assert int(re.search(r"(\d+) new sessions wait", ev.reason).group(1)) == CAP, ev.reason
    st = core.stats()
    assert st.free_slots == SLOTS and st.active == 0 and st.waiting == 0
