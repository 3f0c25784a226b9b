"""Tiny checkpoints for the model tests: real Orpheus vocabulary, tiny width."""

from __future__ import annotations

import pytest
import torch

from orpheus_svc.core.tokens import ORPHEUS_VOCAB_SIZE
from orpheus_svc.models.demo import random_state_dict
from orpheus_svc.models.llama_config import LlamaSpec
from orpheus_svc.models.tokenizer import build_byte_level_tokenizer_json


def make_spec(*, tied: bool = True, layers: int = 2) -> LlamaSpec:
    return LlamaSpec(hidden_size=8, intermediate_size=16, num_hidden_layers=layers,
                     num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                     vocab_size=ORPHEUS_VOCAB_SIZE, tie_word_embeddings=tied,
                     torch_dtype="float32")


@pytest.fixture
def spec() -> LlamaSpec:
    return make_spec()


@pytest.fixture
def state_dict(spec: LlamaSpec) -> dict[str, torch.Tensor]:
    return random_state_dict(spec, seed=7, dtype=torch.float32)


@pytest.fixture
def tokenizer_json() -> str:
    return build_byte_level_tokenizer_json()
