"""Finds a backend's folder by name and builds it: the one place a backend name becomes code.

    engine/<name>/build.py   build(config, device, dtype) -> BuiltBackend

Everything a backend brings is in what its build returns: the backend, the prompt
tokenizer, its own codec if it has one (the sim's), its model's name and directories (for
the voice list) and how a split topology's front-end gets the same tokenizer. runtime.py,
config.py and ipc/ read those fields and never a backend's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from orpheus_svc.core.backends import BACKENDS

# engine.backend -> the module whose build() makes it (imported only when chosen: trtllm's
# needs TensorRT-LLM and CUDA, and no backend should pay for another's imports).
_BUILDERS = {name: f"orpheus_svc.engine.{name}.build" for name in BACKENDS}

# Tokenizers that are code, not a file: a front-end process rebuilds them by this name.
_BUILTIN_TOKENIZERS = {"sim": ("orpheus_svc.engine.sim.encode", "sim_encode")}


@dataclass
class BuiltBackend:
    """What a backend's build() returns (module docstring).

    tokenizer: the prompt tokenizer's tokenizer.json, or the name of a built-in one
    (`load_tokenizer` makes either); None when neither is known (the front-ends of a split
    topology then cannot start). codec: the backend's own codec (the sim's), None to load
    SNAC. model_dir / engine_dir: where its voices.json may be. adapters: the LoRA
    adapters it serves, (name, voices) in pool slot order (slot = position), and
    adapter_details their (directory, rank) in the same order. lora_base: the base model's
    LlamaSpec an adapter loaded while serving is checked against (None: no shapes to
    check, the sim)."""

    backend: Any
    encode: Callable[[str], list[int]]
    model_name: str
    is_demo: bool = False
    codec: Any | None = None
    model_dir: Path | None = None
    engine_dir: Path | None = None
    tokenizer: str | None = None
    adapters: tuple[tuple[str, Any], ...] = ()
    adapter_details: tuple[tuple[str, int], ...] = ()
    lora_base: Any = None


def build_backend(config, device, dtype) -> BuiltBackend:
    """The backend engine.backend names, built from `config` on `device` in `dtype`."""
    module = importlib.import_module(_BUILDERS[config.engine.backend])
    return module.build(config, device, dtype)


def load_tokenizer(spec: str) -> Callable[[str], list[int]]:
    """A prompt tokenizer from BuiltBackend.tokenizer: a built-in one's name, or a path."""
    if spec in _BUILTIN_TOKENIZERS:
        module, name = _BUILTIN_TOKENIZERS[spec]
        return getattr(importlib.import_module(module), name)
    from orpheus_svc.models.tokenizer import TextTokenizer
    return TextTokenizer.from_file(spec).encode
