"""The voice registry and where a model's voice list comes from (core/voices.py, models/voices.py)."""

import json

import pytest

from orpheus_svc.core.tokens import EMOTION_TAGS, VOICES
from orpheus_svc.core.voices import (
    Voice,
    VoiceRegistry,
    VoiceRegistryError,
    english_registry,
    registry_from_dict,
    registry_from_setting,
    registry_to_dict,
)
from orpheus_svc.models.voices import (
    MULTILINGUAL_PRESETS,
    hub_id_of,
    load_voice_registry,
    read_voices_file,
    write_voices_file,
)

FRENCH = {"language": "fr", "voices": ["pierre", "amelie", "marie"]}


def test_english_fallback_is_the_eight_voices_with_tara_default():
    reg = english_registry()
    assert reg.names == list(VOICES) and reg.default == "tara"
    assert reg.emotion_tags == list(EMOTION_TAGS)
    assert all(v.language == "en" for v in reg.voices)


@pytest.mark.parametrize("asked", ["tara", "Tara", "TARA", " tara ", "tArA"])
def test_names_match_case_insensitively_and_resolve_to_the_model_spelling(asked):
    assert english_registry().resolve(asked).name == "tara"


@pytest.mark.parametrize("asked", ["", None, "   "])
def test_empty_name_is_the_default_voice(asked):
    reg = registry_from_dict({**FRENCH, "default": "Amelie"}, "x")
    assert reg.resolve(asked).name == "amelie"
    assert reg.default == "amelie"  # the registry's own spelling, not the file's


def test_unknown_voice_message_lists_the_known_ones():
    reg = registry_from_dict(FRENCH, "x")
    assert reg.resolve("tara") is None
    assert reg.unknown_message("tara") == "unknown voice 'tara'; known voices: pierre, amelie, marie"


def test_voices_json_fields_inherit_and_override():
    reg = registry_from_dict({"language": "es", "emotion_tags": ["<laugh>"], "voices": [
        "javi", {"name": "pietro", "language": "it", "emotion_tags": ["<sigh>", "<laugh>"]},
        {"name": "maria", "emotion_tags": []}]}, "x")
    assert reg.voices == (Voice("javi", "es", ("<laugh>",)), Voice("pietro", "it", ("<sigh>", "<laugh>")),
                          Voice("maria", "es", ()))
    assert reg.default == "javi" and reg.emotion_tags == ["<laugh>", "<sigh>"]


def test_non_latin_names_match_and_round_trip(tmp_path):
    reg = MULTILINGUAL_PRESETS["canopylabs/3b-zh-ft-research_release"]
    assert reg.resolve("白芷").language == "zh"
    write_voices_file(tmp_path, reg)
    assert read_voices_file(tmp_path / "voices.json").voices == reg.voices
    assert "白芷" in (tmp_path / "voices.json").read_text(encoding="utf-8")  # not \\u escapes


@pytest.mark.parametrize("raw, says", [
    ({"voices": []}, "non-empty list"),
    ({"voices": ["a", "A"]}, "repeated: a"),
    ({"voices": ["a"], "default": "b"}, "default voice 'b'"),
    ({"voices": ["a:b"]}, "voices[0]"),
    ({"voices": [" a"]}, "voices[0]"),
    ({"voices": [{"language": "fr"}]}, "voices[0]"),
    ({"voices": [{"name": "a", "gender": "f"}]}, "unknown field(s) gender"),
    ({"voices": ["a"], "language": "french!"}, "BCP 47"),
    ({"voices": ["a"], "emotion_tags": ["laugh"]}, "look like <laugh>"),
    ({"voices": ["a"], "speakers": []}, "unknown field(s) speakers"),
    (["a", "b"], "JSON object"),
])
def test_malformed_voice_lists_are_refused_with_the_field_named(raw, says):
    with pytest.raises(VoiceRegistryError, match=None) as err:
        registry_from_dict(raw, "ckpt/voices.json")
    assert says in str(err.value) and "ckpt/voices.json" in str(err.value)


def test_registry_round_trips_through_its_dict_form():
    reg = registry_from_dict({**FRENCH, "default": "marie", "emotion_tags": ["<laugh>"]}, "x")
    again = registry_from_dict(registry_to_dict(reg), "y")
    assert again.voices == reg.voices and again.default == "marie"


def test_inline_setting_first_is_default_and_language_optional():
    reg = registry_from_setting("Pierre:fr, amelie:fr ,bob")
    assert reg.names == ["Pierre", "amelie", "bob"] and reg.default == "Pierre"
    assert [v.language for v in reg.voices] == ["fr", "fr", "en"]
    assert reg.resolve("bob").emotion_tags == EMOTION_TAGS and reg.resolve("pierre").emotion_tags == ()
    with pytest.raises(VoiceRegistryError):
        registry_from_setting(" , ")


def test_registry_rejects_an_empty_list():
    with pytest.raises(VoiceRegistryError):
        VoiceRegistry((), "tara")


@pytest.mark.parametrize("ref, hub", [
    ("canopylabs/3b-fr-ft-research_release", "canopylabs/3b-fr-ft-research_release"),
    ("canopylabs/3b-fr-ft-research_release@main", "canopylabs/3b-fr-ft-research_release"),
    ("/root/.cache/huggingface/hub/models--canopylabs--3b-de-ft-research_release/snapshots/abc",
     "canopylabs/3b-de-ft-research_release"),
    ("/srv/models/orpheus", None),
    ("./orpheus", None),
    (None, None),
])
def test_hub_id_of(ref, hub):
    assert hub_id_of(ref) == hub


def test_source_order_setting_then_checkpoint_file_then_preset_then_english(tmp_path, caplog):
    ckpt, engine = tmp_path / "ckpt", tmp_path / "engine"
    ckpt.mkdir()
    engine.mkdir()
    fr = "canopylabs/3b-fr-ft-research_release"
    # nothing: English, with a warning for an unknown checkpoint
    assert load_voice_registry(model_ref=str(ckpt), model_dir=ckpt).names == list(VOICES)
    assert "not a checkpoint with known voices" in caplog.text
    # a preset by hub id (also through a hub-cache path)
    assert load_voice_registry(model_ref=fr).names == ["pierre", "amelie", "marie"]
    # the engine dir's voices.json beats the preset; the checkpoint's beats the engine's
    (engine / "voices.json").write_text(json.dumps({"voices": ["eve"]}))
    assert load_voice_registry(model_ref=fr, engine_dir=engine).names == ["eve"]
    (ckpt / "voices.json").write_text(json.dumps({"voices": ["ada"]}))
    assert load_voice_registry(model_ref=fr, model_dir=ckpt, engine_dir=engine).names == ["ada"]
    # the setting beats everything: inline, a file, or a directory holding voices.json
    assert load_voice_registry(setting="zed:de", model_dir=ckpt).names == ["zed"]
    assert load_voice_registry(setting=str(engine / "voices.json"), model_dir=ckpt).names == ["eve"]
    assert load_voice_registry(setting=str(engine), model_dir=ckpt).names == ["eve"]


def test_a_local_copy_named_like_the_repository_gets_its_preset(tmp_path):
    local = tmp_path / "3b-es_it-ft-research_release"
    local.mkdir()
    reg = load_voice_registry(model_ref=str(local), model_dir=local)
    assert reg.names[:3] == ["javi", "sergio", "maria"] and reg.resolve("Giulia").language == "it"


def test_canopy_english_checkpoint_gets_the_english_voices_without_a_warning(caplog):
    reg = load_voice_registry(model_ref="canopylabs/orpheus-3b-0.1-ft")
    assert reg.names == list(VOICES) and "known voices" not in caplog.text


def test_broken_voices_file_is_an_error_not_a_fallback(tmp_path):
    (tmp_path / "voices.json").write_text("{not json")
    with pytest.raises(VoiceRegistryError, match="not valid JSON"):
        load_voice_registry(model_dir=tmp_path)


def test_every_multilingual_preset_is_a_valid_registry_with_its_languages():
    langs = {hub: sorted({v.language for v in reg.voices}) for hub, reg in MULTILINGUAL_PRESETS.items()}
    assert langs == {
        "canopylabs/3b-fr-ft-research_release": ["fr"],
        "canopylabs/3b-de-ft-research_release": ["de"],
        "canopylabs/3b-es_it-ft-research_release": ["es", "it"],
        "canopylabs/3b-ko-ft-research_release": ["ko"],
        "canopylabs/3b-hi-ft-research_release": ["hi"],
        "canopylabs/3b-zh-ft-research_release": ["zh"],
    }


def test_an_unknown_voice_is_echoed_cut_to_60_characters():
    registry = english_registry()
    name = "n" * 59 + "XY"
    assert registry.unknown_message(name) == \
        f"unknown voice {name[:60]!r}; known voices: tara, leah, jess, leo, dan, mia, zac, zoe"
    assert "X" in registry.unknown_message(name) and "Y" not in registry.unknown_message(name)


@pytest.mark.parametrize("value, message", [
    ("", "model.voices: empty voice list"),
    (" , ", "model.voices: empty voice list"),
    (":fr", "model.voices: a voice name must be non-empty text without surrounding spaces, "
            "':', '<', '>' or line breaks, got ''"),
    ("x:zz_9", "model.voices: 'x:zz_9': language must be a BCP 47 tag like \"en\" or "
               "\"zh-CN\", got 'zz_9'"),
    ("tara, TARA", "model.voices: voice names must differ ignoring case; repeated: tara"),
])
def test_the_voices_setting_names_itself_when_refused(value, message):
    with pytest.raises(VoiceRegistryError) as err:
        registry_from_setting(value)
    assert str(err.value) == message


def test_a_registry_from_the_setting_says_where_it_came_from():
    assert registry_from_setting("tara").source == "model.voices"
    assert registry_from_setting("tara", "VOICES env").source == "VOICES env"
