"""A split topology's front-end builds a reference voice's prompts itself (ipc/frontend.py
remote_runtime): the engine's snapshot carries each reference voice's transcript and audio
tokens, and the voice list's reference marks."""

from types import SimpleNamespace

from orpheus_svc.core.output import SchedulerStats
from orpheus_svc.core.reference import ReferenceVoice, build_reference_prompt, with_reference_voices
from orpheus_svc.core.tokens import frames_to_token_ids
from orpheus_svc.core.voices import english_registry
from orpheus_svc.engine.handle import EventRouter
from orpheus_svc.ipc import wire
from orpheus_svc.ipc.frontend import remote_runtime


def test_a_front_end_builds_the_reference_prompt_the_engine_process_would():
    ref = ReferenceVoice("Clone", "Words of the clip.",
                         tuple(frames_to_token_ids([[i, 2 * i, 3, 4, 5, 6, 7] for i in range(13)])),
                         "fr")
    voices = with_reference_voices(english_registry(), [ref])
    stats = SchedulerStats(1, 2, 3, 4, 7, 10, 8, 1, 1, 99, 1234, 0)
    info = wire.EngineInfo("m", False, "cpu", "sim", "sim", voices, 8, references=(ref,))
    _, out = wire.decode_message(wire.encode_stats(wire.EngineSnapshot(True, stats, info=info)))
    assert out.info.references == (ref,)
    assert out.info.voices.resolve("clone").reference and not out.info.voices.resolve("tara").reference

    link = SimpleNamespace(engine=SimpleNamespace(snapshot=out), router=EventRouter())
    front = remote_runtime(None, link)
    request = front.request("s", 0, "clone", "Bonjour.")
    assert request.prompt_ids == tuple(build_reference_prompt(front.encode, ref, "Bonjour."))
    assert front.voices.resolve("clone").reference
