"""A SlotLlama from the configured checkpoint (or the demo one): what the torch and graph
backends' builders share."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.models.adapters import ConfiguredAdapters, read_configured_adapters

log = logging.getLogger(__name__)

DEMO_WARNING = ("no model configured: using the embedded DEMO checkpoint (seeded random weights "
                "of the Orpheus architecture). It streams audio through the full pipeline, but "
                "the audio is NOT speech. Set model.path (and model.snac) for real voices.")


@dataclass
class LoadedModel:
    model: SlotLlama
    encode: Callable[[str], list[int]]
    model_dir: Path
    model_name: str
    is_demo: bool
    # model.adapters, read and installed in the model's LoRA pool (models/adapters.py)
    adapters: ConfiguredAdapters | None = None

    @property
    def tokenizer(self) -> str | None:
        """The checkpoint's tokenizer.json (a split topology's front-ends load it)."""
        path = self.model_dir / "tokenizer.json"
        return str(path) if path.is_file() else None


def load_slot_llama(config, device: torch.device, dtype: torch.dtype,
                    spare_slots: int = 0) -> LoadedModel:
    """model.path's checkpoint (the demo's when unset, with a warning) over engine.max_sessions
    KV slots of engine.max_seq_len, plus `spare_slots` (the graph engine's dummy slot)."""
    from orpheus_svc.models.loader import load_checkpoint

    m, e = config.model, config.engine
    is_demo = m.path is None
    ref = m.path
    if is_demo:
        from orpheus_svc.models.demo import ensure_demo_checkpoint
        log.warning(DEMO_WARNING)
        ref = str(ensure_demo_checkpoint().model_dir)
    ckpt = load_checkpoint(ref, device="cpu", dtype=dtype)
    adapters = read_configured_adapters(config, ckpt.spec)  # before the weights go anywhere
    model = SlotLlama(ckpt.spec, ckpt.state_dict, num_slots=e.max_sessions,
                      max_seq_len=e.max_seq_len, device=device, dtype=dtype,
                      quantization=m.quantization, spare_slots=spare_slots,
                      fp8_gemm=m.fp8_gemm, max_adapters=adapters.capacity,
                      max_lora_rank=adapters.rank, kv_cache_dtype=e.kv_cache_dtype)
    if model.lora is not None:
        adapters.install(model.lora)
        for index, (name, w) in enumerate(adapters.adapters):
            log.info("LoRA adapter %s in slot %d: %s, voices %s", name, index, w.info(),
                     ", ".join(w.voices.names))
    return LoadedModel(model, ckpt.tokenizer.encode, Path(ckpt.path),
                       "demo" if is_demo else str(ref), is_demo, adapters)
