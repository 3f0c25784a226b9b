import time

from orpheus_svc.core.events import AudioEvent, Rejected
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.step import BackendCapabilities
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.torch.backend import TorchBackend

from .harness import Collector, RecordingFlusher
from .tiny import tiny_model

PROMPT = (128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257)


def _engine(slots=8, batch=8, waiting=64, max_seq_len=256, seed=1):
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(TorchBackend(tiny_model(num_slots=slots, max_seq_len=max_seq_len)), flusher,
                      events, settings=SchedulerSettings(max_batch_size=batch, max_waiting=waiting),
                      seed=seed)
    core.start()
    return core, flusher, events


def _req(session="s", max_tokens=35, seed=None, prompt=PROMPT):
    return GenerationRequest(session_id=session, segment_index=0, prompt_ids=prompt,
                             max_tokens=max_tokens, sampling=SamplingParams(seed=seed))


def test_64_concurrent_generations_all_finish_with_their_frames():
    core, flusher, events = _engine(slots=16, batch=16, waiting=64)
    try:
        ids = [core.submit(_req(session=f"s{i}", max_tokens=7 * (1 + i % 5))) for i in range(64)]
        events.wait_for(lambda ev: events.ended(ids))
        fin = events.finishes()
        assert set(fin) == set(ids)
        for i, gid in enumerate(ids):
            assert fin[gid].reason == "length"
            assert fin[gid].num_frames == 1 + i % 5
            assert len(flusher.frames[gid]) == fin[gid].num_frames and flusher.final[gid]
        st = core.stats()
        assert st.free_slots == 16 and st.active == 0 and st.finished == 64
    finally:
        core.stop()


def test_same_seed_gives_the_same_audio_alone_or_in_a_crowd():
    core, flusher, events = _engine()
    try:
        alone = core.submit(_req(seed=42, max_tokens=28))
        events.wait_for(lambda ev: events.ended([alone]))
        crowd = [core.submit(_req(session=f"c{i}", seed=42 if i == 3 else i, max_tokens=28))
                 for i in range(6)]
        events.wait_for(lambda ev: events.ended(crowd))
        assert flusher.frames[alone] == flusher.frames[crowd[3]]
        assert flusher.frames[crowd[0]] != flusher.frames[crowd[3]]
    finally:
        core.stop()


def test_full_admission_queue_rejects_with_resource_exhausted():
    core, flusher, events = _engine(slots=1, batch=1, waiting=1)
    try:
        ids = [core.submit(_req(session=f"s{i}", max_tokens=700)) for i in range(6)]
        events.wait_for(lambda ev: len(events.of(Rejected)) >= 4)
        rej = events.of(Rejected)
        assert all(r.code == "RESOURCE_EXHAUSTED" and "capacity" in r.reason for r in rej)
        for gid in ids:
            core.cancel(gid)
        events.wait_for(lambda ev: events.ended(ids))
        time.sleep(0.05)
        assert core.stats().free_slots == 1
    finally:
        core.stop()


def test_cancel_frees_the_slot_and_drops_audio():
    core, flusher, events = _engine(slots=2, batch=2, max_seq_len=4096)
    try:
        gid = core.submit(_req(max_tokens=4000))
        events.wait_for(lambda ev: len(flusher.frames[gid]) >= 2)
        core.cancel(gid)
        events.wait_for(lambda ev: events.ended([gid]))
        fin = events.finish(gid)
        assert fin.reason == "cancelled" and gid in flusher.dropped and gid not in flusher.final
        events.wait_for(lambda ev: core.stats().free_slots == 2, timeout=5)
    finally:
        core.stop()


def test_prompt_longer_than_a_slot_is_rejected_as_invalid_argument():
    core, flusher, events = _engine(max_seq_len=32)
    try:
        gid = core.submit(_req(prompt=tuple(range(40))))
        events.wait_for(lambda ev: events.ended([gid]))
        rej = events.of(Rejected, gid)[0]
        assert rej.code == "INVALID_ARGUMENT" and "max_seq_len" in rej.reason
        assert not events.of(AudioEvent, gid)
    finally:
        core.stop()


def test_max_tokens_is_clipped_to_the_slot_length():
    core, flusher, events = _engine(max_seq_len=64)
    try:
        gid = core.submit(_req(max_tokens=7000))
        events.wait_for(lambda ev: events.ended([gid]))
        fin = events.finish(gid)
        assert fin.reason == "length" and len(PROMPT) + fin.num_generated <= 64
    finally:
        core.stop()


class _FailingBackend:
    capabilities = BackendCapabilities(name="failing", num_slots=2, max_seq_len=64)

    def step(self, plan):
        raise RuntimeError("boom")

    def release(self, gen_ids):
        return list(gen_ids)

    def close(self):
        pass


def test_a_failing_step_fails_its_generations_and_frees_their_slots():
    events = Collector()
    flusher = RecordingFlusher(events)
    core = EngineLoop(_FailingBackend(), flusher, events)
    core.start()
    try:
        gid = core.submit(_req())
        events.wait_for(lambda ev: events.ended([gid]))
        fin = events.finish(gid)
        # issue 10: a short message with an error id; the exception text stays in the log
        assert fin.reason == "error" and "error id" in fin.error and "boom" not in fin.error
        events.wait_for(lambda ev: core.stats().free_slots == 2, timeout=5)
    finally:
        core.stop()


class _ExplodingFlusher(RecordingFlusher):
    def push(self, gen_id, frames, final, playout=None, finish=None, seed=None):
        raise RuntimeError("flusher bug")


def test_an_unexpected_error_after_the_step_ends_generations_and_keeps_the_thread():
    events = Collector()
    core = EngineLoop(TorchBackend(tiny_model()), _ExplodingFlusher(events), events, seed=1)
    core.start()
    try:
        gid = core.submit(_req(max_tokens=35))
        events.wait_for(lambda ev: events.ended([gid]))
        fin = events.finish(gid)
        assert fin.reason == "error" and "internal" in fin.error
        events.wait_for(lambda ev: core.stats().free_slots == 4, timeout=5)
        core.flusher = RecordingFlusher(events)  # the thread is still serving
        again = core.submit(_req(max_tokens=14))
        events.wait_for(lambda ev: events.ended([again]))
        assert events.finish(again).reason == "length"
    finally:
        core.stop()


def test_64_concurrent_generations_stream_exact_audio_through_the_real_flusher(tmp_path):
    """EngineLoop + Flusher + a random-init SNAC of the real 24 kHz architecture: every
    generation's audio is exactly frames x 2048 samples, contiguous, with one final event."""
    from orpheus_svc.audio.codec import load_snac, write_random_snac
    from orpheus_svc.audio.flusher import Flusher
    from orpheus_svc.audio.settings import FlusherSettings
    from orpheus_svc.core.events import AudioEvent

    codec = load_snac(write_random_snac(tmp_path / "snac", seed=3))
    events = Collector()
    flusher = Flusher(codec, FlusherSettings(), events)
    core = EngineLoop(TorchBackend(tiny_model(num_slots=16, max_seq_len=256)), flusher, events,
                      settings=SchedulerSettings(max_batch_size=16, max_waiting=64), seed=2)
    flusher.start()
    core.start()
    try:
        ids = [core.submit(_req(session=f"s{i}", max_tokens=7 * (1 + i % 4))) for i in range(64)]

        def all_final(ev):
            return {e.gen_id for e in ev if isinstance(e, AudioEvent) and e.final} >= set(ids)

        events.wait_for(all_final, timeout=300)
        fin = events.finishes()
        for gid in ids:
            audio = events.of(AudioEvent, gid)
            offsets = [a.sample_offset for a in audio]
            assert offsets == [sum(a.num_samples for a in audio[:k]) for k in range(len(audio))]
            assert sum(a.num_samples for a in audio) == fin[gid].num_frames * 2048
            assert [a.final for a in audio].count(True) == 1 and audio[-1].final
    finally:
        core.stop()
        flusher.stop()


class _CountingBackend(TorchBackend):
    def __init__(self, model):
        super().__init__(model)
        self.steps = 0

    def step(self, plan):
        self.steps += 1
        return super().step(plan)


def test_engine_waits_instead_of_spinning_when_everything_is_far_ahead():
    events = Collector()
    core = EngineLoop(TorchBackend(tiny_model(max_seq_len=4096)), RecordingFlusher(events),
                      events, seed=1, settings=SchedulerSettings(max_ahead_seconds=2.0))
    core.start()
    try:
        gid = core.submit(_req(max_tokens=4000))
        # 600 tokens = 7.3 s of audio, made much faster than real time: the session is now
        # beyond the 2 s horizon and may only advance as fast as playback (82 tokens/s)
        deadline = time.monotonic() + 60
        while core.stats().tokens < 600 and time.monotonic() < deadline:
            time.sleep(0.02)
        before = core.stats()
        time.sleep(0.5)
        after = core.stats()
        assert after.tokens - before.tokens < 100  # ~41 at playback pace, not free-running
        assert after.steps - before.steps < 150  # idle waits, not thousands of empty plans
        core.cancel(gid)
        events.wait_for(lambda ev: events.ended([gid]))  # a command still wakes it at once
    finally:
        core.stop()


def test_a_later_segment_tells_the_flusher_it_plays_after_the_one_before():
    core, flusher, events = _engine()
    try:
        reqs = [GenerationRequest(session_id="a", segment_index=k, prompt_ids=PROMPT,
                                  max_tokens=70, sampling=SamplingParams(seed=k))
                for k in range(2)]
        ids = [core.submit(r) for r in reqs]
        events.wait_for(lambda ev: events.ended(ids))
        first, second = (flusher.playout[g][0].starts_at for g in ids)
        # segment 1 is heard after at least segment 0's first frame (85.3 ms of audio)
        assert second >= first + 0.0853 - 1e-6
    finally:
        core.stop()
