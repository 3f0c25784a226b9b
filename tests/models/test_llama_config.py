"""LlamaSpec: parsing, validation messages, Orpheus-3B figures, RoPE scaling."""

from __future__ import annotations

import json
import math

import pytest

from orpheus_svc.core.tokens import ORPHEUS_VOCAB_SIZE
from orpheus_svc.models.llama_config import LlamaSpec, orpheus_3b_spec


def _hf_config(**overrides):
    raw = orpheus_3b_spec().to_dict()
    raw.update(overrides)
    return raw


def test_orpheus_3b_parameter_count_is_3_3_billion():
    spec = orpheus_3b_spec()
    assert spec.num_parameters() == 3_300_867_072
    # Tied head: untying adds exactly one vocab x hidden matrix.
    untied = LlamaSpec.from_dict(_hf_config(tie_word_embeddings=False))
    assert untied.num_parameters() - spec.num_parameters() == ORPHEUS_VOCAB_SIZE * 3072


def test_orpheus_3b_kv_bytes_per_token_fp16():
    # 28 layers x (K, V) x 8 kv heads x 128 x 2 bytes
    assert orpheus_3b_spec().kv_bytes_per_token(2) == 28 * 2 * 8 * 128 * 2 == 114_688


def test_to_dict_from_dict_round_trip_through_json():
    spec = orpheus_3b_spec()
    again = LlamaSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert hash(again) == hash(spec)


def test_real_llama_3_2_config_fields_parse():
    raw = _hf_config(eos_token_id=[128001, 128008, 128009], torch_dtype=None, dtype="bfloat16",
                     rope_scaling={"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192},
                     transformers_version="4.45.0")
    del raw["head_dim"]
    spec = LlamaSpec.from_dict(raw)
    assert spec.head_dim == 128  # hidden / heads when absent
    assert spec.eos_token_ids == (128001, 128008, 128009)
    assert spec.torch_dtype == "bfloat16"
    assert spec.rope_scaling["factor"] == 32.0


@pytest.mark.parametrize("overrides, field", [
    ({"architectures": ["MistralForCausalLM"]}, "architectures"),
    ({"model_type": "gpt2", "architectures": None}, "model_type"),
    ({"vocab_size": 128256}, "vocab_size"),
    ({"num_key_value_heads": 5}, "num_key_value_heads"),
    ({"hidden_size": 0}, "hidden_size"),
    ({"num_hidden_layers": "28"}, "num_hidden_layers"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 32.0}}, "rope_scaling.low_freq_factor"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": -1, "low_freq_factor": 1,
                       "high_freq_factor": 4, "original_max_position_embeddings": 8192}},
     "rope_scaling.factor"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_bad_config_error_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        LlamaSpec.from_dict(_hf_config(**overrides))


def test_config_without_any_architecture_hint_is_refused():
    raw = _hf_config()
    del raw["architectures"], raw["model_type"]
    with pytest.raises(ValueError, match="architectures"):
        LlamaSpec.from_dict(raw)


def test_from_file_prefixes_the_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_hf_config(vocab_size=1000)))
    with pytest.raises(ValueError, match=r"config\.json.*vocab_size"):
        LlamaSpec.from_file(tmp_path)


def test_tensor_shapes_follow_gqa_layout():
    shapes = orpheus_3b_spec().tensor_shapes()
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (3072, 3072)
    assert shapes["model.layers.27.self_attn.k_proj.weight"] == (1024, 3072)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (3072, 8192)
    assert "lm_head.weight" not in shapes  # tied
    assert len(shapes) == 1 + 28 * 9 + 1


def test_llama3_rope_scaling_keeps_high_and_divides_low_frequencies():
    spec = orpheus_3b_spec()
    unscaled = LlamaSpec.from_dict(_hf_config(rope_scaling=None)).rope_inv_freq()
    scaled = spec.rope_inv_freq()
    assert len(scaled) == 64
    assert scaled[0] == unscaled[0] == 1.0  # wavelength 2pi << 8192/4: unchanged
    assert math.isclose(scaled[-1], unscaled[-1] / 32)  # wavelength >> 8192: divided by factor
    # In between the blend is monotone, like the unscaled frequencies.
    assert all(a > b for a, b in zip(scaled, scaled[1:]))
