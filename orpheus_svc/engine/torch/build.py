"""Builds the torch backend (the eager reference) from the config: engine/registry.py's entry."""

from __future__ import annotations

from orpheus_svc.engine.model.load import load_slot_llama
from orpheus_svc.engine.model.prefix_pool import PrefixPool
from orpheus_svc.engine.registry import BuiltBackend
from orpheus_svc.engine.torch.backend import TorchBackend


def build(config, device, dtype) -> BuiltBackend:
    loaded = load_slot_llama(config, device, dtype)
    pool = PrefixPool(loaded.model, config.engine.prefix_pool_mb) \
        if config.engine.prefix_pool_mb else None
    return BuiltBackend(TorchBackend(loaded.model, pool), loaded.encode, loaded.model_name,
                        is_demo=loaded.is_demo, model_dir=loaded.model_dir,
                        tokenizer=loaded.tokenizer,
                        adapters=loaded.adapters.served,
                        adapter_details=loaded.adapters.details, lora_base=loaded.model.spec)
