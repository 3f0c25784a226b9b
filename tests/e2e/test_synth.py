"""Offline synthesis (orpheus-svc synth) and the generation handle, on a real Runtime: the
sim backend and codec (fast, no weights) in this process, and the CLI on the demo model."""

import subprocess
import sys
import wave

import numpy as np
import pytest

from orpheus_svc.config import load_config
from orpheus_svc.core.events import AudioEvent
from orpheus_svc.core.tokens import SAMPLES_PER_FRAME
from orpheus_svc.runtime import build_runtime
from orpheus_svc.synth import SynthesisError, synthesize

TEXT = "Hello there. This is a test of the offline path! And a third sentence."


@pytest.fixture
def sim_runtime(request):
    faults = getattr(request, "param", "")
    config = load_config(environ={}, overrides={
        "engine.backend": "sim", "engine.max_sessions": 4, "engine.max_batch_size": 4,
        "engine.sim_faults": faults})
    runtime = build_runtime(config)
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


def test_synthesize_runs_the_session_and_returns_every_segment(sim_runtime):
    result = synthesize(sim_runtime, TEXT, seed=5)
    assert result.segments == ["Hello there.", "This is a test of the offline path!",
                               "And a third sentence."]
    # each segment ended on its stop id: 7 tokens a frame, plus the stop token
    frames, stops = divmod(result.num_tokens, 7)
    assert stops == 3 and frames > 0
    # whole frames of audio; PCM16 samples as float32 (the WAV holds exactly these)
    assert result.pcm.dtype == np.float32 and len(result.pcm) == frames * SAMPLES_PER_FRAME
    again = synthesize(sim_runtime, TEXT, seed=5)
    assert np.array_equal(result.pcm, again.pcm)  # the seed makes it reproducible


def test_synthesize_errors_are_synthesis_errors(sim_runtime):
    with pytest.raises(SynthesisError, match="nobody"):
        synthesize(sim_runtime, "Hi.", voice="nobody")
    with pytest.raises(SynthesisError, match="no text to speak"):
        synthesize(sim_runtime, "   ")


@pytest.mark.parametrize("sim_runtime", ["codec_error:77"], indirect=True)
def test_a_failed_segment_fails_the_synthesis_with_the_servers_message(sim_runtime):
    # segment 1 runs with seed 76 + 1: its audio fails to decode
    with pytest.raises(SynthesisError, match=r"segment 1 failed: audio decode failed \(error id"):
        synthesize(sim_runtime, TEXT, seed=76)


def test_a_handle_streams_one_ordered_stream_and_closes_idempotently(sim_runtime):
    rt = sim_runtime
    with rt.open(rt.request("h", 0, rt.voices.default, "Hello there, one more time.")) as gen:
        events = list(gen.events(timeout=60))
        assert gen.ended
    audio = [e for e in events if isinstance(e, AudioEvent)]
    assert audio[-1] is events[-1] and audio[-1].final and audio[-1].finish.reason == "stop"
    assert [e.sample_offset for e in audio] == list(np.cumsum([0] + [e.num_samples for e in audio[:-1]]))
    assert sum(e.num_samples for e in audio) == audio[-1].finish.num_frames * SAMPLES_PER_FRAME
    gen.close()  # again: nothing happens
    assert rt.warm_up() > 0


def test_a_cancelled_handle_ends_with_one_cancelled_event(sim_runtime):
    rt = sim_runtime
    req = rt.request("c", 0, rt.voices.default, "A long sentence that keeps going " * 8)
    with rt.open(req) as gen:
        first = next(gen.events(timeout=60))  # admitted or first audio: it is running
        gen.cancel()
        rest = list(gen.events(timeout=60))
    ends = [e for e in [first, *rest] if isinstance(e, AudioEvent) and e.final]
    assert len(ends) == 1 and ends[0] is rest[-1] and ends[0].finish.reason == "cancelled"
    assert ends[0].num_samples == 0


def test_the_cli_writes_a_wav_from_the_demo_model(tmp_path):
    out = tmp_path / "out.wav"
    proc = subprocess.run([sys.executable, "-m", "orpheus_svc.app.cli", "synth", "--text",
                           "Hello there. General Kenobi!", "--out", str(out), "--seed", "3"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "2 segment(s)" in proc.stderr
    with wave.open(str(out)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        assert w.getnframes() > 0 and w.getnframes() % SAMPLES_PER_FRAME == 0
