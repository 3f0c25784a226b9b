"""Fault isolation in EngineLoop, proven with the sim backend's injected faults (issue 10):
a backend step or codec call that raises fails only the generation that caused it."""

import threading

import pytest

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.events import AudioEvent, Finish, Rejected
from orpheus_svc.core.prompt import build_prompt, max_tokens_for_text
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.tokens import SAMPLES_PER_FRAME
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.faults import SimFaults
from orpheus_svc.engine.sim.encode import sim_encode
from orpheus_svc.engine.sim.profiles import get_profile

BAD_SEED = 4242


class _Recorder:
    """Collects engine and flusher events; wait() blocks until every generation ended.
    `finals`: generations whose audio completed (final event of a stop/length end)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.expected: set[int] = set()
        self.finished: dict[int, Finish] = {}
        self.rejected: dict[int, Rejected] = {}
        self.samples: dict[int, int] = {}
        self.finals: set[int] = set()
        self.ends: dict[int, int] = {}  # final events per generation: exactly one each

    def __call__(self, batch):
        with self.lock:
            for ev in batch:
                if isinstance(ev, AudioEvent):
                    self.samples[ev.gen_id] = self.samples.get(ev.gen_id, 0) + ev.num_samples
                    if ev.final:
                        self.ends[ev.gen_id] = self.ends.get(ev.gen_id, 0) + 1
                        self.finished[ev.gen_id] = ev.finish
                        if ev.finish.reason in ("stop", "length"):
                            self.finals.add(ev.gen_id)
                elif isinstance(ev, Rejected):
                    self.rejected[ev.gen_id] = ev
            if self.expected and self.expected <= set(self.finished) | set(self.rejected):
                self.done.set()


class _StepLog(SimBackend):
    """SimBackend that records the size of every step that raised."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.raised_sizes: list[int] = []

    def step(self, plan):
        try:
            return super().step(plan)
        except Exception:
            self.raised_sizes.append(len(plan.rows))
            raise


def _engine(faults: SimFaults, rows: int = 32, codec_faults: bool = False):
    profile = get_profile("h100-fp8")
    backend = _StepLog(profile, num_slots=rows, max_seq_len=1024, faults=faults,
                       sleep=lambda s: None)
    rec = _Recorder()
    codec = SimCodec(profile, sleep=lambda s: None, faults=codec_faults)
    flusher = Flusher(codec, FlusherSettings(), rec, on_error=lambda gids, exc: "audio decode failed")
    core = EngineLoop(backend, flusher, rec, settings=SchedulerSettings(max_batch_size=rows),
                      seed=1)
    return core, flusher, backend, rec


def _request(i: int, seed: int | None) -> GenerationRequest:
    text = "A short sentence for the test."
    return GenerationRequest(session_id=f"s{i}", segment_index=0,
                             prompt_ids=tuple(build_prompt(sim_encode, "tara", text)),
                             max_tokens=max_tokens_for_text(text), expected_frames=6,
                             sampling=SamplingParams(seed=seed))


def _run(core, flusher, rec, requests):
    flusher.start()
    ids = [core.new_id() for _ in requests]
    rec.expected = set(ids)
    for gid, req in zip(ids, requests):
        core.submit(req, gid)
    core.start()  # after the submits: all 32 are admitted into the same first step
    try:
        assert rec.done.wait(60), "not every generation ended"
    finally:
        core.stop()
        flusher.stop(timeout=10)
    assert all(rec.ends.get(g, 0) == (0 if g in rec.rejected else 1) for g in ids)
    return ids


def test_a_step_fault_in_one_row_of_32_fails_only_that_row():
    core, flusher, backend, rec = _engine(SimFaults(step_error={BAD_SEED: 14}))
    ids = _run(core, flusher, rec, [_request(i, BAD_SEED if i == 17 else 1000 + i)
                                    for i in range(32)])
    bad = ids[17]
    assert backend.raised_sizes[0] == 32  # the fault hit a full 32-row step
    fin = rec.finished[bad]
    assert fin.reason == "error" and "error id" in fin.error and "injected" not in fin.error
    for gid in ids:
        if gid == bad:
            continue
        f = rec.finished[gid]
        assert f.reason == "stop", f
        assert rec.samples[gid] == f.num_frames * SAMPLES_PER_FRAME and gid in rec.finals
    assert core.failed_rows == 1
    stats = core.stats()
    assert stats.active == 0 and stats.free_slots == 32


def test_a_prefill_fault_fails_only_the_new_row():
    core, flusher, backend, rec = _engine(SimFaults(step_error={BAD_SEED: 0}), rows=8)
    ids = _run(core, flusher, rec, [_request(i, BAD_SEED if i == 3 else 50 + i)
                                    for i in range(8)])
    assert [rec.finished[g].reason for g in ids] == ["stop"] * 3 + ["error"] + ["stop"] * 4


def test_a_codec_fault_fails_only_the_generation_whose_audio_it_is():
    core, flusher, backend, rec = _engine(SimFaults(codec_error={BAD_SEED}), rows=8,
                                          codec_faults=True)
    ids = _run(core, flusher, rec, [_request(i, BAD_SEED if i == 5 else 70 + i)
                                    for i in range(8)])
    assert rec.finished[ids[5]].reason == "error" and ids[5] not in rec.finals
    codec = flusher.codec
    # A seeded generation's windows share calls of a fixed row count with the others'
    # (issue 33: 8 rows here), so its fault fails such a call; the flusher then decodes
    # that call's windows one by one, each still in a call of its 8 rows (its bits must
    # not change), and only the poisoned window's fails again: the others finish (below).
    # (A generation's last window goes alone: a call of 1 row, if the fault reaches it.)
    assert codec.failed_calls and set(codec.failed_calls) <= {8, 1}
    for i, gid in enumerate(ids):
        if i != 5:
            assert gid in rec.finals
            assert rec.samples[gid] == rec.finished[gid].num_frames * SAMPLES_PER_FRAME


def test_seeds_are_taken_modulo_2_64_and_bad_sampling_is_refused_at_the_engine_edge():
    core, flusher, backend, rec = _engine(SimFaults(), rows=4)
    bad = GenerationRequest(session_id="x", segment_index=0, prompt_ids=(1, 2, 3),
                            max_tokens=70, sampling=SamplingParams(top_p=float("nan")))
    ids = _run(core, flusher, rec, [_request(0, 2 ** 64 + 5), _request(1, 5),
                                    _request(2, -1), bad])
    assert rec.rejected[ids[3]].code == "INVALID_ARGUMENT" and "top_p" in rec.rejected[ids[3]].reason
    # 2^64 + 5 is the same generation as 5 (same frames); -1 is 2^64 - 1, a legal seed
    assert rec.finished[ids[0]].num_frames == rec.finished[ids[1]].num_frames
    assert rec.finished[ids[2]].reason == "stop"


def test_fault_spec_parsing():
    f = SimFaults.parse("step_error:7@14, slow_step:9@0.5,codec_error:11")
    assert f.step_error == {7: 14} and f.slow_step == {9: 0.5} and f.codec_error == {11}
    assert not SimFaults.parse("")
    with pytest.raises(ValueError, match="step_error:SEED@TOKEN"):
        SimFaults.parse("explode:7")


def test_a_slow_step_delays_its_steps_and_fails_nobody():
    profile = get_profile("h100-fp8")
    slept: list[float] = []
    backend = SimBackend(profile, num_slots=4, max_seq_len=1024, sleep=slept.append,
                         faults=SimFaults(slow_step={BAD_SEED: 0.25}))
    rec = _Recorder()
    flusher = Flusher(SimCodec(profile, sleep=lambda s: None), FlusherSettings(), rec)
    core = EngineLoop(backend, flusher, rec, settings=SchedulerSettings(max_batch_size=4), seed=1)
    ids = _run(core, flusher, rec, [_request(i, BAD_SEED if i == 0 else 90 + i) for i in range(4)])
    assert all(rec.finished[g].reason == "stop" for g in ids)
    assert slept.count(0.25) == rec.finished[ids[0]].num_generated  # every step it was in
