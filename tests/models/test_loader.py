"""load_checkpoint / write_checkpoint: round trips, sharding, and errors that name the problem."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from orpheus_svc.models.demo import random_state_dict
from orpheus_svc.hub import CheckpointNotFoundError
from orpheus_svc.models.loader import (
    INDEX_FILE, SINGLE_FILE, CheckpointError, load_checkpoint, write_checkpoint,
)
from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json

from .conftest import make_spec


def _assert_same(loaded: dict, original: dict) -> None:
    assert set(loaded) == set(original)
    for name, tensor in original.items():
        assert torch.equal(loaded[name], tensor.to(loaded[name].dtype)), name


def test_single_file_round_trip(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    assert (tmp_path / SINGLE_FILE).is_file() and not (tmp_path / INDEX_FILE).exists()
    ck = load_checkpoint(tmp_path)
    assert ck.spec == spec
    assert ck.path == tmp_path
    _assert_same(ck.state_dict, state_dict)
    assert ck.tokenizer.encode("hi")[0] == 128000


def test_sharded_round_trip_writes_index_and_loads_every_tensor(tmp_path, spec, state_dict,
                                                                tokenizer_json):
    # The embedding (~5 MB) exceeds the limit and gets a shard of its own; layers share the rest.
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json, max_shard_bytes=2048)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (tmp_path / SINGLE_FILE).exists()
    assert index["metadata"]["total_size"] == sum(t.numel() * 4 for t in state_dict.values())
    _assert_same(load_checkpoint(tmp_path).state_dict, state_dict)


def test_missing_shard_is_named(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json, max_shard_bytes=2048)
    victim = sorted(tmp_path.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"missing: {victim.name}"):
        load_checkpoint(tmp_path)


def test_tensor_listed_in_index_but_absent_from_shard_is_named(tmp_path, spec, state_dict,
                                                               tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json, max_shard_bytes=2048)
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    name = "model.layers.1.mlp.up_proj.weight"
    shard = tmp_path / index["weight_map"][name]
    tensors = load_file(shard)
    del tensors[name]
    save_file(tensors, shard)
    with pytest.raises(CheckpointError, match=rf"'{name}' is listed in .*index\.json"):
        load_checkpoint(tmp_path)


def test_tensor_missing_from_single_file_is_named(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    tensors = load_file(tmp_path / SINGLE_FILE)
    del tensors["model.layers.0.self_attn.v_proj.weight"]
    save_file(tensors, tmp_path / SINGLE_FILE)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.self_attn\.v_proj\.weight'"
                                              r" missing"):
        load_checkpoint(tmp_path)


def test_wrong_shape_names_tensor_and_both_shapes(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    tensors = load_file(tmp_path / SINGLE_FILE)
    tensors["model.layers.1.mlp.down_proj.weight"] = torch.zeros(8, 15)
    save_file(tensors, tmp_path / SINGLE_FILE)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.1\.mlp\.down_proj\.weight' has "
                                              r"shape \[8, 15\], config\.json implies \[8, 16\]"):
        load_checkpoint(tmp_path)


def test_write_refuses_wrong_shape_before_writing(tmp_path, spec, state_dict, tokenizer_json):
    state_dict["model.norm.weight"] = torch.ones(9)
    with pytest.raises(CheckpointError, match=r"'model\.norm\.weight' has shape \[9\]"):
        write_checkpoint(tmp_path / "out", spec, state_dict, tokenizer_json)
    assert not (tmp_path / "out").exists()


def test_unexpected_tensor_is_refused(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    tensors = load_file(tmp_path / SINGLE_FILE)
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(8)
    save_file(tensors, tmp_path / SINGLE_FILE)
    with pytest.raises(CheckpointError, match=r"unexpected tensor.*q_proj\.bias"):
        load_checkpoint(tmp_path)


def test_non_llama_config_is_refused_by_field(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["architectures"] = ["Qwen2ForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"architectures is \['Qwen2ForCausalLM'\]"):
        load_checkpoint(tmp_path)


def test_untied_checkpoint_has_its_own_lm_head(tmp_path, tokenizer_json):
    spec = make_spec(tied=False)
    sd = random_state_dict(spec, seed=3, dtype=torch.float32)
    write_checkpoint(tmp_path, spec, sd, tokenizer_json)
    ck = load_checkpoint(tmp_path)
    assert torch.equal(ck.lm_head_weight, sd["lm_head.weight"])
    assert not torch.equal(ck.lm_head_weight, ck.state_dict["model.embed_tokens.weight"])


def test_untied_config_without_lm_head_says_how_to_fix(tmp_path, spec, state_dict,
                                                       tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)  # tied: no lm_head stored
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["tie_word_embeddings"] = False
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"'lm_head\.weight' missing.*tie_word_embeddings"):
        load_checkpoint(tmp_path)


def test_tied_checkpoint_uses_embedding_and_ignores_a_stored_head(tmp_path, spec, state_dict,
                                                                   tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    tensors = load_file(tmp_path / SINGLE_FILE)
    tensors["lm_head.weight"] = torch.zeros_like(tensors["model.embed_tokens.weight"])
    save_file(tensors, tmp_path / SINGLE_FILE)
    ck = load_checkpoint(tmp_path)
    assert "lm_head.weight" not in ck.state_dict
    assert ck.lm_head_weight is ck.state_dict["model.embed_tokens.weight"]


def test_write_drops_tied_head_equal_to_embedding_and_refuses_a_different_one(
        tmp_path, spec, state_dict, tokenizer_json):
    same = dict(state_dict, **{"lm_head.weight": state_dict["model.embed_tokens.weight"]})
    write_checkpoint(tmp_path / "a", spec, same, tokenizer_json)
    assert "lm_head.weight" not in load_file(tmp_path / "a" / SINGLE_FILE)
    other = dict(state_dict, **{"lm_head.weight": torch.zeros(spec.vocab_size, 8)})
    with pytest.raises(CheckpointError, match="lm_head.weight differs"):
        write_checkpoint(tmp_path / "b", spec, other, tokenizer_json)


def test_dtype_defaults_to_float32_on_cpu_and_can_be_chosen(tmp_path, spec, tokenizer_json):
    sd = random_state_dict(spec, seed=1, dtype=torch.float16)
    write_checkpoint(tmp_path, spec, sd, tokenizer_json)
    assert load_checkpoint(tmp_path).state_dict["model.norm.weight"].dtype == torch.float32
    half = load_checkpoint(tmp_path, dtype="bfloat16").state_dict
    assert all(t.dtype == torch.bfloat16 for t in half.values())
    with pytest.raises(ValueError, match="int4"):
        load_checkpoint(tmp_path, dtype="int4")


def test_integer_tensor_is_refused(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    tensors = load_file(tmp_path / SINGLE_FILE)
    tensors["model.norm.weight"] = torch.ones(8, dtype=torch.int8)
    save_file(tensors, tmp_path / SINGLE_FILE)
    with pytest.raises(CheckpointError, match=r"'model\.norm\.weight' has dtype I8"):
        load_checkpoint(tmp_path)


def test_directory_without_weights_or_config_says_what_is_missing(tmp_path, spec, state_dict,
                                                                  tokenizer_json):
    with pytest.raises(CheckpointError, match="config.json missing"):
        load_checkpoint(tmp_path)
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    (tmp_path / SINGLE_FILE).rename(tmp_path / "model-00001-of-00002.safetensors")
    with pytest.raises(CheckpointError, match=f"neither {SINGLE_FILE} nor {INDEX_FILE}"):
        load_checkpoint(tmp_path)
    (tmp_path / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"\.bin checkpoints are not supported"):
        load_checkpoint(tmp_path)


def test_missing_tokenizer_is_named(tmp_path, spec, state_dict, tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json not found"):
        load_checkpoint(tmp_path)


def test_tokenizer_ids_beyond_the_embedding_are_refused(tmp_path, spec, state_dict):
    doc = json.loads(build_byte_level_tokenizer_json())
    doc["model"]["vocab"]["<far>"] = 200_000
    doc["added_tokens"].append({"id": 200_000, "content": "<far>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": True})
    write_checkpoint(tmp_path, spec, state_dict, json.dumps(doc))
    with pytest.raises(CheckpointError, match="id 200000 but the model has only 156940"):
        load_checkpoint(tmp_path)


def test_write_refuses_a_directory_that_already_holds_a_checkpoint(tmp_path, spec, state_dict,
                                                                   tokenizer_json):
    write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)
    with pytest.raises(FileExistsError, match="already holds a checkpoint"):
        write_checkpoint(tmp_path, spec, state_dict, tokenizer_json)


def test_local_path_that_does_not_exist_says_so(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no such directory"):
        load_checkpoint(tmp_path / "nope")


def test_hub_id_offline_with_empty_cache_explains_what_to_do(tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # huggingface_hub reads HF_HOME at import; point its cache at the empty dir as well.
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointNotFoundError) as info:
        load_checkpoint("no-such-org/orpheus-test-model")
    message = str(info.value)
    assert "offline mode" in message and "HF_HUB_OFFLINE" in message
    assert "huggingface-cli download no-such-org/orpheus-test-model" in message


def test_default_dtype_is_float32_on_cpu_and_the_checkpoints_on_cuda(spec):
    import dataclasses

    from orpheus_svc.models.loader import default_dtype

    bf16 = dataclasses.replace(spec, torch_dtype="bfloat16")
    assert default_dtype(bf16, torch.device("cpu")) == torch.float32
    assert default_dtype(bf16, torch.device("cuda")) == torch.bfloat16
    assert default_dtype(dataclasses.replace(spec, torch_dtype=None), torch.device("cuda")) is None
