"""A reference voice in the voice list (a name no other voice has) and in the slot (its
prefix leaves a segment room): core/reference.py with_reference_voices and check_room."""

import pytest

from orpheus_svc.core.reference import (
    ReferenceVoice,
    ReferenceVoiceError,
    check_room,
    reference_prefix,
    with_reference_voices,
)
from orpheus_svc.core.tokens import SAMPLE_RATE, SAMPLES_PER_FRAME, frames_to_token_ids
from orpheus_svc.core.voices import VoiceRegistry, english_registry, registry_from_setting


def encode(text):
    return [128000, *(1000 + ord(c) for c in text)]  # BOS, then one id per character


def ref(name="clone", seconds=2.0, transcript="Words the clip says."):
    frames = round(seconds * SAMPLE_RATE / SAMPLES_PER_FRAME)
    return ReferenceVoice(name, transcript, tuple(frames_to_token_ids([[i % 4096] * 7
                                                                       for i in range(frames)])))


def test_reference_voices_follow_the_base_voices_marked_as_references():
    voices = with_reference_voices(english_registry(), [ref("ann"), ref("bob")])
    assert voices.names[-2:] == ["ann", "bob"] and voices.default == "tara"
    assert [v.name for v in voices.voices if v.reference] == ["ann", "bob"]
    assert voices.resolve("Ann").emotion_tags == () and voices.resolve("ann").adapter is None
    assert not voices.resolve("tara").reference


@pytest.mark.parametrize("name, owner", [("Tara", "base model"), ("nova", "adapter 'nova-lora'"),
                                         ("ANN", "a reference voice")])
def test_a_taken_name_is_refused_naming_the_entry(name, owner):
    adapters = [("nova-lora", registry_from_setting("nova"))]
    with pytest.raises(ValueError, match=rf"model\.reference_voices\[1\]\.name: '{name}' is "
                                         rf"already .*{owner}"):
        with_reference_voices(english_registry(), [ref("ann"), ref(name)], adapters)


def test_a_twenty_second_reference_fits_the_default_slot():
    voice = ref(seconds=20.0, transcript="x" * 300)
    prefix = len(reference_prefix(encode, voice))
    assert 1700 < prefix < 2000  # 235 frames of 7 tokens, the transcript's turn
    assert check_room(encode, voice, 4096) == 4096 - prefix


def test_a_prefix_that_leaves_no_room_for_a_segment_is_refused():
    voice = ref(seconds=20.0)
    prefix = len(reference_prefix(encode, voice))
    with pytest.raises(ReferenceVoiceError, match=r"leaving \d+ of the slot's 1900 .*"
                                                  r"engine\.max_seq_len") as err:
        check_room(encode, voice, 1900)
    assert err.value.field == "clip"
    # the smallest slot that fits: the prefix, a short sentence's turn and budget, one spare
    smallest = next(n for n in range(prefix, prefix + 600) if _fits(voice, n))
    # [START_OF_HUMAN] encode(text) PROMPT_SUFFIX, 44 frames (max_tokens_for_text), 1 spare
    assert smallest - prefix == 1 + len(encode("Hello there.")) + 4 + 44 * 7 + 1


def _fits(voice, n):
    try:
        check_room(encode, voice, n)
        return True
    except ReferenceVoiceError:
        return False


def test_a_registry_without_references_is_unchanged():
    base = VoiceRegistry(english_registry().voices, "leo", "x")
    assert with_reference_voices(base, []) == base
