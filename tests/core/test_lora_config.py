"""What an adapter_config.json may say (core/lora_config.py), the model.adapters setting's
forms, and voice names across the base model and its adapters (core/voices.py): each
refusal names the field at fault."""

import math

import pytest

from orpheus_svc.config import ConfigError, load_config
from orpheus_svc.core.lora_config import (
    AdapterError,
    AdapterSource,
    adapter_sources,
    parse_lora_config,
)
from orpheus_svc.core.voices import Voice, VoiceRegistry, VoiceRegistryError, english_registry
from orpheus_svc.core.voices import with_adapter_voices

PEFT = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": ["q_proj"],
        "bias": "none", "use_dora": False, "use_rslora": False, "modules_to_save": None,
        "lora_dropout": 0.05, "task_type": "CAUSAL_LM", "rank_pattern": {},
        "alpha_pattern": {}, "fan_in_fan_out": False, "init_lora_weights": True}


def test_plain_and_rslora_scaling_are_peft_s():
    assert parse_lora_config(PEFT).scaling == 2.0
    rs = parse_lora_config({**PEFT, "use_rslora": True})
    assert rs.scaling == pytest.approx(32 / math.sqrt(16))


@pytest.mark.parametrize("field, value", [
    ("peft_type", "IA3"), ("bias", "all"), ("use_dora", True), ("lora_bias", True),
    ("modules_to_save", ["lm_head"]), ("rank_pattern", {"q_proj": 4}),
    ("alpha_pattern", {"q_proj": 4}), ("trainable_token_indices", [1, 2]),
    ("a_field_from_a_newer_peft", 3), ("r", 0), ("lora_alpha", "x"), ("use_rslora", "yes"),
])
def test_what_we_do_not_apply_is_refused_naming_its_field(field, value):
    with pytest.raises(AdapterError) as err:
        parse_lora_config({**PEFT, field: value}, "nova/adapter_config.json")
    assert str(err.value).startswith(f"nova/adapter_config.json: {field} ")


def test_an_unset_unknown_field_is_accepted():
    assert parse_lora_config({**PEFT, "a_field_from_a_newer_peft": None}).r == 16


def test_model_adapters_forms():
    assert adapter_sources(None) == adapter_sources("") == ()
    assert adapter_sources("nova=/a/nova, orion = /a/orion") == (
        AdapterSource("nova", "/a/nova"), AdapterSource("orion", "/a/orion"))
    assert adapter_sources({"nova": {"path": "/a/nova", "voices": "nova:en"},
                            "orion": "owner/orion"}) == (
        AdapterSource("nova", "/a/nova", "nova:en"), AdapterSource("orion", "owner/orion"))


@pytest.mark.parametrize("value, words", [
    ("nova", "'nova' must be name=path"),
    ({"../x": "/a"}, "adapter name '../x'"),
    ({"nova": "/a", "NOVA": "/b"}, "model.adapters.NOVA: named twice"),
    ({"nova": {"path": "/a", "rank": 4}}, "model.adapters.nova: unknown field(s) rank"),
    ({"nova": {"voices": "x"}}, "model.adapters.nova: expected the adapter's directory"),
    ([1], "expected a mapping"),
])
def test_model_adapters_refusals_name_the_entry(value, words):
    with pytest.raises(ValueError) as err:
        adapter_sources(value)
    assert words in str(err.value)


def test_the_config_refuses_a_bad_model_adapters_naming_it():
    with pytest.raises(ConfigError, match=r"^model.adapters: 'nova' must be name=path"):
        load_config(overrides={"model.adapters": "nova"}, environ={})
    with pytest.raises(ConfigError, match="engine.max_lora_rank must be 0..512"):
        load_config(overrides={"engine.max_lora_rank": 1000}, environ={})
    c = load_config(environ={"ORPHEUS_MODEL__ADAPTERS": "nova=/a/nova"})
    assert adapter_sources(c.model.adapters) == (AdapterSource("nova", "/a/nova"),)


def test_adapter_voices_are_tagged_and_names_stay_unique():
    base = english_registry()
    nova = VoiceRegistry((Voice("nova", "en"),), "nova")
    both = with_adapter_voices(base, [("nova-lora", nova)])
    assert both.default == base.default and both.resolve("NOVA").adapter == "nova-lora"
    assert both.resolve("tara").adapter is None
    with pytest.raises(VoiceRegistryError, match="voice 'Tara' is already a voice of the base"):
        with_adapter_voices(base, [("x", VoiceRegistry((Voice("Tara", "en"),), "Tara"))])
    with pytest.raises(VoiceRegistryError, match="already a voice of adapter 'a'"):
        with_adapter_voices(base, [("a", nova), ("b", nova)])


def test_orpheus_svc_config_prints_adapters_that_load_back(tmp_path):
    from orpheus_svc.config import dump

    c = load_config(overrides={"model.adapters": {"nova": {"path": "/a/nova", "voices": "nova"},
                                                  "orion": "/a/orion"},
                               "engine.max_lora_rank": 32}, environ={})
    path = tmp_path / "c.yaml"
    path.write_text(dump(c))
    again = load_config(path, environ={})
    assert again == c and adapter_sources(again.model.adapters)[0].voices == "nova"


def test_adapter_dirs_forms_and_refusals():
    from orpheus_svc.core.lora_config import adapter_dirs

    assert adapter_dirs(None) == adapter_dirs("") == adapter_dirs([]) == ()
    assert adapter_dirs("/a, /b/../c") == ("/a", "/c")
    assert adapter_dirs(["/srv/adapters/"]) == ("/srv/adapters",)
    with pytest.raises(ValueError, match=r"model.adapter_dirs\[0\]: 'adapters' must be an absolute"):
        adapter_dirs("adapters")
    with pytest.raises(ValueError, match="expected a list of directories"):
        adapter_dirs({"a": "/a"})
    with pytest.raises(ValueError, match=r"model.adapter_dirs\[1\]: expected a directory"):
        adapter_dirs(["/a", 3])
