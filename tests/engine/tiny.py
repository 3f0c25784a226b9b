"""Tiny Llama checkpoints for engine tests (real vocabulary, tiny width)."""

import dataclasses

import torch

from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.models.demo import demo_spec, random_state_dict


def tiny_spec(**overrides):
    return dataclasses.replace(demo_spec(), torch_dtype="float32", **overrides)


def tiny_model(num_slots=4, max_seq_len=256, seed=0, **spec_overrides):
    spec = tiny_spec(**spec_overrides)
    weights = random_state_dict(spec, seed, dtype=torch.float32)
    # larger than HF init so logits differ clearly between tokens and positions
    weights = {k: (v * 10 if not k.endswith("norm.weight") else v) for k, v in weights.items()}
    return SlotLlama(spec, weights, num_slots=num_slots, max_seq_len=max_seq_len)
