"""PEFT LoRA adapters for tests, made by the real `peft` library on the real `transformers`
Llama that shares the tiny test checkpoint's weights (tests/engine/tiny.py's spec).

`make_adapter(dir, ...)` builds the HF model, wraps it with `get_peft_model(LoraConfig(...))`,
gives lora_B non-zero values (PEFT initialises B to zero, which would make every adapter
the base model) and writes it with `save_pretrained`, plus a voices.json naming its voice.
`hf_model(...)` returns the same HF + PEFT model for reference logits."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from orpheus_svc.models.demo import random_state_dict

from .tiny import tiny_spec

ALL_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def base_weights(seed: int = 0, scale: float = 10.0) -> dict[str, torch.Tensor]:
    """The tiny checkpoint's weights (float32), as tests/engine/tiny.py scales them."""
    spec = tiny_spec()
    w = random_state_dict(spec, seed, dtype=torch.float32)
    return {k: (v * scale if not k.endswith("norm.weight") else v) for k, v in w.items()}


def hf_base(weights: dict[str, torch.Tensor], dtype=torch.float64):
    """transformers' LlamaForCausalLM with the tiny spec and `weights`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = tiny_spec().to_dict()
    cfg.pop("torch_dtype", None)
    config = LlamaConfig(**cfg)
    config._attn_implementation = "sdpa"  # eager attention takes its softmax in float32
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    model.tie_weights()
    return model.to(dtype).eval()


def peft_model(weights, *, r: int, alpha: float, rslora: bool = False,
               modules=ALL_MODULES, seed: int = 1, b_scale: float = 0.5,
               dtype=torch.float64):
    """The HF model wrapped by PEFT with a LoRA of rank r, A and B random (B non-zero)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = get_peft_model(hf_base(weights, torch.float32),
                               LoraConfig(r=r, lora_alpha=alpha, target_modules=list(modules),
                                          use_rslora=rslora, lora_dropout=0.0, bias="none"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
            elif "lora_B" in name:  # PEFT starts B at zero: the adapter would do nothing
                p.copy_(torch.randn(p.shape, generator=gen) * b_scale)
    return model.to(dtype).eval()


def make_adapter(out: Path, weights, *, r: int = 8, alpha: float = 16, rslora: bool = False,
                 modules=ALL_MODULES, seed: int = 1, voice: str | None = "nova",
                 b_scale: float = 0.5) -> Path:
    """A PEFT adapter directory written by save_pretrained (+ voices.json naming `voice`)."""
    model = peft_model(weights, r=r, alpha=alpha, rslora=rslora, modules=modules, seed=seed,
                       b_scale=b_scale, dtype=torch.float32)
    out = Path(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(out))
    if voice:
        (out / "voices.json").write_text(json.dumps({"voices": [voice]}))
    return out


def make_demo_adapter(out: Path, *, voice: str = "nova", r: int = 8, seed: int = 3) -> Path:
    """A PEFT adapter (every projection, rank r, B non-zero) for the demo checkpoint the
    server loads when no model is configured, written by save_pretrained with a voices.json
    naming `voice`: what a person would bring to the server."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    from orpheus_svc.models.demo import ensure_demo_checkpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = LlamaForCausalLM.from_pretrained(str(ensure_demo_checkpoint().model_dir),
                                                dtype=torch.float32)
        model = get_peft_model(base, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                                target_modules=list(ALL_MODULES)))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    out = Path(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(str(out))
    (out / "voices.json").write_text(json.dumps({"voices": [voice]}))
    return out
