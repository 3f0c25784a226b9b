"""A reference voice at start-up (runtime.build_runtime) and in offline synthesis, on the sim
backend: made from model.reference_voices, spoken by name by synthesize(), and refused at
start-up, naming the entry, when its name is taken or its prefix leaves a segment no room."""

import numpy as np
import pytest

from orpheus_svc.audio.codec import SNAC_24KHZ_CONFIG, write_random_snac
from orpheus_svc.config import load_config
from orpheus_svc.core.reference import build_reference_prompt
from orpheus_svc.models.reference_voices import ReferenceStartupError
from orpheus_svc.runtime import FrontRuntime, build_runtime
from orpheus_svc.synth import synthesize

from ..audio.clip_helpers import encode_clip, sweep

TINY = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 64}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    snac = write_random_snac(root / "snac", seed=3, config=TINY)
    (root / "clip.wav").write_bytes(encode_clip(sweep(1.5, 24000), 24000, "wav"))
    return str(snac), str(root / "clip.wav")


def _config(files, name="clone", **overrides):
    snac, clip = files
    return load_config(environ={}, overrides={
        "engine.backend": "sim", "engine.max_sessions": 4, "engine.max_batch_size": 4,
        "model.snac": snac, **overrides,
        "model.reference_voices": [{"name": name, "clip": clip, "transcript": "A tone."}]})


def test_offline_synth_speaks_a_reference_voice_with_its_prompt(files, monkeypatch):
    opened = []
    real_open = FrontRuntime.open
    monkeypatch.setattr(FrontRuntime, "open", lambda self, req, *a, **k: (
        opened.append(req), real_open(self, req, *a, **k))[1])
    runtime = build_runtime(_config(files))
    runtime.start()
    try:
        ref = runtime.references["clone"]
        assert ref.frames == 18 and runtime.voices.resolve("clone").reference
        result = synthesize(runtime, "Hello there. A second one.", voice="clone", seed=5)
        again = synthesize(runtime, "Hello there. A second one.", voice="clone", seed=5)
    finally:
        runtime.stop()
    assert len(result.pcm) > 0 and np.array_equal(result.pcm, again.pcm)
    assert [r.prompt_ids for r in opened[:2]] == [
        tuple(build_reference_prompt(runtime.encode, ref, t))
        for t in ("Hello there.", "A second one.")]


def test_a_reference_voice_named_like_a_base_voice_stops_start_up(files):
    with pytest.raises(ReferenceStartupError,
                       match=r"model\.reference_voices\[0\]\.name: 'Tara' is already a voice "
                             r"of the base model"):
        build_runtime(_config(files, name="Tara"))


def test_a_reference_that_leaves_a_segment_no_room_stops_start_up(files):
    with pytest.raises(ReferenceStartupError,
                       match=r"model\.reference_voices\[0\]\.clip: reference voice 'clone'.* "
                             r"of the slot's 300 \(engine\.max_seq_len\)"):
        build_runtime(_config(files, **{"engine.max_seq_len": 300}))
