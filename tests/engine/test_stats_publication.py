"""EngineLoop publishes stats() at most every STATS_INTERVAL_S while generations run, and at
once when one comes or goes or the loop goes idle (Scheduler.stats scans every session)."""

import dataclasses

from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.engine.loop import STATS_INTERVAL_S, EngineLoop
from orpheus_svc.engine.torch.backend import TorchBackend

from .harness import Collector, RecordingFlusher
from .tiny import tiny_model

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _engine(clock, slots=4):
    events = Collector()
    core = EngineLoop(TorchBackend(tiny_model(num_slots=slots, max_seq_len=4096)),
                      RecordingFlusher(events), events,
                      settings=SchedulerSettings(max_batch_size=slots), seed=1, clock=clock)
    calls = []
    inner = core._scheduler.stats
    core._scheduler.stats = lambda now=None, **kw: calls.append(now) or inner(now, **kw)
    return core, events, calls


def _req(session, max_tokens):
    return GenerationRequest(session_id=session, segment_index=0, prompt_ids=PROMPT,
                             max_tokens=max_tokens, sampling=SamplingParams(seed=7))


def test_between_changes_stats_wait_for_the_interval():
    clock = Clock()
    core, _, calls = _engine(clock)
    core._publish_stats(going_idle=False)
    assert len(calls) == 1  # never published yet
    clock.t += STATS_INTERVAL_S / 2
    core._publish_stats(going_idle=False)
    assert len(calls) == 1
    clock.t += STATS_INTERVAL_S / 2
    core._publish_stats(going_idle=False)
    assert len(calls) == 2 and calls[-1] == clock.t
    clock.t += 0.001
    core._publish_stats(going_idle=True)  # the loop is about to wait: publish what it has
    assert len(calls) == 3
    clock.t += 0.001
    core._stats_stale = True  # a generation came or went
    core._stats = dataclasses.replace(core._stats, underrun_risk=3)
    core._publish_stats(going_idle=False)
    assert len(calls) == 4 and not core._stats_stale
    # the counters at once, but no scan of the sessions: the last underrun_risk stays
    assert calls[-1] is None and core.stats().underrun_risk == 3
    clock.t += 0.001
    core._publish_stats(going_idle=False)
    assert len(calls) == 4


def test_a_frozen_clock_publishes_only_on_changes_and_idle_yet_the_figures_end_fresh():
    clock = Clock()  # never advances: the interval never elapses
    core, events, calls = _engine(clock)
    core.start()
    try:
        gid = core.submit(_req("a", max_tokens=7 * 40))  # 280 steps
        events.wait_for(lambda ev: events.ended([gid]))
        events.wait_for(lambda ev: core.stats().free_slots == 4, timeout=5)
        st = core.stats()
        assert st.active == 0 and st.finished == 1 and st.tokens == 280 and st.steps >= 280
        # submit, admit, finish, idle: a handful, not one per step
        assert len(calls) < 10, len(calls)
    finally:
        core.stop()


def test_while_running_stats_move_every_interval():
    clock = Clock()
    core, events, calls = _engine(clock)
    steps = []

    def on_step(rows, seconds):  # each step moves the clock a millisecond
        steps.append(rows)
        clock.t += 0.001

    core._on_step = on_step
    core.start()
    try:
        gid = core.submit(_req("a", max_tokens=7 * 60))  # 420 steps, 0.42 s of clock
        events.wait_for(lambda ev: events.ended([gid]))
        events.wait_for(lambda ev: core.stats().free_slots == 4, timeout=5)
        # about 0.42 / 0.05 = 8 by the interval, plus the changes and idle
        assert 6 <= len(calls) <= 20, (len(calls), len(steps))
        assert core.stats().tokens == 420
    finally:
        core.stop()
