"""Builds the graph engine from the config: engine/registry.py's entry."""

from __future__ import annotations

from orpheus_svc.engine.graph.backend import GraphBackend
from orpheus_svc.engine.model.prefix_pool import PrefixPool
from orpheus_svc.engine.model.load import load_slot_llama
from orpheus_svc.engine.registry import BuiltBackend


def build(config, device, dtype) -> BuiltBackend:
    e = config.engine
    loaded = load_slot_llama(config, device, dtype, spare_slots=1)  # + the dummy slot
    backend = GraphBackend(loaded.model, e.max_batch_size,
                           graphs=e.cuda_graphs and device.type == "cuda",
                           prefill_rows=e.graph_prefill_rows,
                           prefixes=PrefixPool(loaded.model, e.prefix_pool_mb)
                           if e.prefix_pool_mb and not loaded.model.kv_fp8 else None)
    return BuiltBackend(backend, loaded.encode, loaded.model_name, is_demo=loaded.is_demo,
                        model_dir=loaded.model_dir, tokenizer=loaded.tokenizer,
                        adapters=loaded.adapters.served,
                        adapter_details=loaded.adapters.details, lora_base=loaded.model.spec)
