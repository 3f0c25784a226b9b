import json

import numpy as np
import pytest

from orpheus_svc.core import reference as R
from orpheus_svc.core.reference import ReferenceVoice, ReferenceVoiceError
from orpheus_svc.core.tokens import frames_to_token_ids


def fake_encode(text):
    return [128000] + [ord(c) for c in text]


def clip_ids(frames=R.MIN_CLIP_FRAMES, seed=0):
    return frames_to_token_ids(np.random.default_rng(seed).integers(0, 4096, (frames, 7)))


def voice(**kw):
    fields = dict(name="ann", transcript="It was a bright cold day.", audio_token_ids=clip_ids(),
                  language="en")
    fields.update(kw)
    return ReferenceVoice(**fields)


# -- the prompt ------------------------------------------------------------------------------

def test_prompt_ids_are_the_zero_shot_layout_token_for_token():
    ref = voice()
    audio = list(ref.audio_token_ids)
    want = ([128259, 128000, *map(ord, "It was a bright cold day."), 128009, 128260]
            + [128261, 128257, *audio, 128258, 128262]
            + [128259, 128000, *map(ord, "Hello."), 128009, 128260]
            + [128261, 128257])
    assert R.build_reference_prompt(fake_encode, ref, "Hello.") == want


def test_the_prefix_is_the_start_of_every_prompt_in_the_voice_and_holds_no_text():
    ref = voice()
    prefix = R.reference_prefix(fake_encode, ref)
    for text in ("Hi.", "A longer sentence, with a comma.", "ann: tara"):
        prompt = R.build_reference_prompt(fake_encode, ref, text)
        assert prompt[:len(prefix)] == prefix
        assert prompt[len(prefix):] == R.text_turn(fake_encode, text)
    # the prefix ends the reference's AI turn; the text's turn follows
    assert prefix[-2:] == [128258, 128262]


def test_the_text_turn_has_no_voice_name_in_front():
    ids = R.text_turn(fake_encode, "Hi")
    assert ids == [128259, 128000, ord("H"), ord("i"), 128009, 128260, 128261, 128257]


def test_the_orpheus_3b_kv_cost_per_token():
    assert R.kv_bytes_per_token(28, 8, 128, 2) == R.ORPHEUS_3B_KV_BYTES_PER_TOKEN == 114_688


# -- a reference voice's checks --------------------------------------------------------------

@pytest.mark.parametrize("name", ["", " ann", "ann/../x", "a" * 65, "-ann", "an n", None, 3])
def test_a_bad_name_is_refused_naming_the_name(name):
    with pytest.raises(ReferenceVoiceError) as err:
        voice(name=name)
    assert err.value.field == "name"


@pytest.mark.parametrize("name", ["ann", "Ann.2", "a" * 64, "9-lives_x"])
def test_a_good_name_is_kept(name):
    assert voice(name=name).name == name


@pytest.mark.parametrize("transcript", ["", "   ", None, "x" * (R.MAX_TRANSCRIPT_CHARS + 1)])
def test_a_missing_or_too_long_transcript_is_refused_naming_the_transcript(transcript):
    with pytest.raises(ReferenceVoiceError) as err:
        voice(transcript=transcript)
    assert err.value.field == "transcript"


def test_the_transcript_is_stripped_and_may_be_as_long_as_the_limit():
    assert voice(transcript="  Hello.\n").transcript == "Hello."
    assert len(voice(transcript="x" * R.MAX_TRANSCRIPT_CHARS).transcript) == R.MAX_TRANSCRIPT_CHARS


@pytest.mark.parametrize("language", ["", "english!", None, "e"])
def test_a_bad_language_is_refused_naming_the_language(language):
    with pytest.raises(ReferenceVoiceError) as err:
        voice(language=language)
    assert err.value.field == "language"


def test_clip_tokens_must_be_whole_frames_at_their_positions():
    ids = clip_ids()
    for bad in (ids[:-1], [ids[1]] + ids[1:], ids[:-1] + [128258]):
        with pytest.raises(ReferenceVoiceError) as err:
            voice(audio_token_ids=bad)
        assert err.value.field == "clip"


def test_clip_frames_are_bounded_by_the_clip_limits():
    assert voice(audio_token_ids=clip_ids(R.MIN_CLIP_FRAMES)).frames == R.MIN_CLIP_FRAMES
    assert voice(audio_token_ids=clip_ids(R.MAX_CLIP_FRAMES)).frames == R.MAX_CLIP_FRAMES
    for frames in (R.MIN_CLIP_FRAMES - 1, R.MAX_CLIP_FRAMES + 1):
        with pytest.raises(ReferenceVoiceError) as err:
            voice(audio_token_ids=clip_ids(frames))
        assert err.value.field == "clip"


def test_the_frame_limits_are_the_second_limits_in_whole_frames():
    assert (R.MIN_CLIP_FRAMES, R.MAX_CLIP_FRAMES) == (12, 352)
    assert voice(audio_token_ids=clip_ids(R.MAX_CLIP_FRAMES)).seconds == pytest.approx(30.04, abs=0.01)


# -- the clip's PCM --------------------------------------------------------------------------

def tone(seconds, dbfs=-20.0, rate=24000):
    t = np.arange(int(seconds * rate)) / rate
    return (np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def clip_problem(pcm):
    try:
        R.check_clip(pcm)
    except ReferenceVoiceError as exc:
        assert exc.field == "clip"
        return exc.message
    return None


def test_a_spoken_length_clip_passes():
    assert clip_problem(tone(2.0)) is None


@pytest.mark.parametrize("pcm, words", [
    (np.zeros(0, np.float32), "no audio"),
    (tone(R.MIN_CLIP_SECONDS - 0.01), "at least"),
    (tone(R.MAX_CLIP_SECONDS + 0.01), "at most"),
    (np.zeros(48000, np.float32), "silent"),
    (tone(3.0, dbfs=-55.0), "silent"),
    (np.stack([tone(2.0), tone(2.0)]), "mono"),
    (np.full(48000, np.nan, np.float32), "finite"),
])
def test_a_bad_clip_is_refused_saying_why(pcm, words):
    assert words in clip_problem(pcm)


def test_silence_counts_windows_of_sound_not_the_average():
    # half a second of tone at -20 dBFS inside 20 s of silence: the whole clip's RMS is
    # about -36 dBFS, yet only 0.5 s is sound
    quiet = np.zeros(20 * 24000, np.float32)
    quiet[24000:36000] = tone(0.5)
    assert R.sound_seconds(quiet) == pytest.approx(0.5, abs=0.05)
    assert clip_problem(quiet[:]) is None  # exactly the minimum of sound
    shorter = quiet.copy()
    shorter[24000 + 2400:36000] = 0  # 0.1 s of it
    assert "silent" in clip_problem(shorter)


def test_sound_is_measured_at_the_stated_threshold():
    assert R.sound_seconds(tone(1.0, dbfs=R.SILENCE_DBFS + 1)) == pytest.approx(1.0)
    assert R.sound_seconds(tone(1.0, dbfs=R.SILENCE_DBFS - 1)) == 0.0


# -- the model.reference_voices setting ------------------------------------------------------

ENTRY = {"name": "ann", "clip": "/clips/ann.wav", "transcript": "Hello there.", "language": "en"}


def test_sources_from_yaml_and_from_json_are_the_same():
    yaml_form = R.reference_sources([ENTRY, {**ENTRY, "name": "bob", "language": "fr"}])
    json_form = R.reference_sources(json.dumps([ENTRY, {**ENTRY, "name": "bob",
                                                        "language": "fr"}]))
    assert yaml_form == json_form
    assert [s.name for s in yaml_form] == ["ann", "bob"]
    assert yaml_form[1] == R.ReferenceSource("bob", "/clips/ann.wav", "Hello there.", "fr")


def test_no_sources_is_empty():
    for empty in (None, "", [], ()):
        assert R.reference_sources(empty) == ()


def test_language_defaults_to_english():
    entry = {k: v for k, v in ENTRY.items() if k != "language"}
    assert R.reference_sources([entry])[0].language == "en"


@pytest.mark.parametrize("entries, where", [
    ([{**ENTRY, "voice": "x"}], "model.reference_voices[0]: unknown field(s) voice"),
    ([ENTRY, {**ENTRY, "transcript": ""}], "model.reference_voices[1].transcript"),
    ([{**ENTRY, "name": "a/b"}], "model.reference_voices[0].name"),
    ([{**ENTRY, "language": "?"}], "model.reference_voices[0].language"),
    ([{**ENTRY, "clip": "ann.wav"}], "model.reference_voices[0].clip"),
    ([{**ENTRY, "clip": None}], "model.reference_voices[0].clip"),
    ([ENTRY, {**ENTRY, "name": "ANN"}], "model.reference_voices[1].name: 'ANN' is named twice"),
    ("{not json", "model.reference_voices: expected a JSON list"),
    ({"ann": "/x.wav"}, "model.reference_voices: expected a list"),
    (["ann"], "model.reference_voices[0]: expected"),
])
def test_a_bad_entry_is_named_with_its_field(entries, where):
    with pytest.raises(ValueError) as err:
        R.reference_sources(entries)
    assert str(err.value).startswith(where)
