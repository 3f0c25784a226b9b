"""The sim backend under the real EngineLoop and Flusher (real threads; no timing asserted)."""

import dataclasses
import sys
import threading
from pathlib import Path

import pytest

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.config import Config, ConfigError, EngineConfig
from orpheus_svc.core.events import AudioEvent
from orpheus_svc.core.prompt import build_prompt, max_tokens_for_text
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.scheduler_settings import SchedulerSettings
from orpheus_svc.core.tokens import SAMPLES_PER_FRAME
from orpheus_svc.engine.loop import EngineLoop
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.codec import SimCodec
from orpheus_svc.engine.sim.build import build_sim_backend


def test_build_sim_backend_from_config():
    cfg = Config(engine=EngineConfig(backend="sim", sim_profile="rtx4090-fp8", max_sessions=8,
                                     max_seq_len=1024))
    backend, encode, codec = build_sim_backend(cfg)
    assert isinstance(backend, SimBackend) and backend.profile.name == "rtx4090-fp8"
    assert (backend.num_slots, backend.max_seq_len) == (8, 1024)
    assert isinstance(codec, SimCodec)
    assert encode("hi there")[0] == 128000
    no_codec = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, sim_codec=False))
    assert build_sim_backend(no_codec)[2] is None


def test_unknown_profile_is_a_config_error_naming_the_setting():
    cfg = Config(engine=EngineConfig(backend="sim", sim_profile="b200"))
    with pytest.raises(ConfigError, match="engine.sim_profile.*h100-fp8"):
        build_sim_backend(cfg)


def test_sixteen_generations_stream_complete_audio_through_engine_and_flusher():
    cfg = Config(engine=EngineConfig(backend="sim", max_sessions=16, max_seq_len=2048))
    backend, encode, codec = build_sim_backend(cfg)
    done = threading.Event()
    samples, finished, finals = {}, {}, set()
    lock = threading.Lock()

    def sink(batch):
        with lock:
            for ev in batch:
                if isinstance(ev, AudioEvent):
                    samples[ev.gen_id] = samples.get(ev.gen_id, 0) + ev.num_samples
                    if ev.final:
                        finals.add(ev.gen_id)
                        finished[ev.gen_id] = ev.finish
            if len(finished) == 16 and finals == set(finished):
                done.set()

    flusher = Flusher(codec, FlusherSettings(), sink)
    core = EngineLoop(backend, flusher, sink, settings=SchedulerSettings(max_batch_size=16), seed=1)
    flusher.start()
    core.start()
    try:
        text = "Short one."
        for i in range(16):
            req = GenerationRequest(session_id=f"s{i}", segment_index=0,
                                    prompt_ids=tuple(build_prompt(encode, "tara", text)),
                                    max_tokens=max_tokens_for_text(text), expected_frames=8)
            core.submit(req)
        assert done.wait(60)
        os_names = {f.read_text().strip() for f in Path("/proc/self/task").glob("*/comm")}
    finally:
        core.stop()
        flusher.stop(timeout=10)
    if sys.platform.startswith("linux"):  # top -H and py-spy tell the two apart
        assert {"engine-core", "snac-flusher"} <= os_names
    for gid, fin in finished.items():
        assert fin.reason == "stop"
        assert samples[gid] == fin.num_frames * SAMPLES_PER_FRAME
    assert core.stats().grammar_violations == 0
