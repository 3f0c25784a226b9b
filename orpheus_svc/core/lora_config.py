"""What a PEFT LoRA adapter's `adapter_config.json` may say, and what it means (pure).

A LoRA adapter adds, to a projection y = x W^T of the base model, a low-rank update

    y = x W^T + scaling * (x A^T) B^T      A [r, in], B [out, r]
    scaling = lora_alpha / r               (use_rslora: lora_alpha / sqrt(r))

which is what PEFT's `LoraLayer` computes at inference (dropout is off there). This module
reads the config fields that decide that function and refuses, naming the field, every
field whose value would make PEFT compute something else, so an adapter is either served
exactly as PEFT would run it or not at all (docs/lora.md lists the rules):

  checked   peft_type LORA, r, lora_alpha, use_rslora, bias "none", use_dora false,
            lora_bias false, modules_to_save none, rank_pattern / alpha_pattern empty,
            fan_in_fan_out (PEFT itself resets it to false for nn.Linear targets, Llama's
            projections, so the weights are stored the same either way: accepted, noted)
  inert     fields that only describe training or initialisation (below)
  unknown   any other field: accepted while it holds an unset value (null, false, {}, [],
            ""), refused when set, since a PEFT release newer than this code may use it to
            change the forward

Which modules an adapter touches is read from its weights (the keys of
adapter_model.safetensors), not from `target_modules`: those are the tensors PEFT loads.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

# Training, initialisation and bookkeeping only: no effect on the inference forward.
INERT_FIELDS = frozenset({
    "auto_mapping", "base_model_name_or_path", "revision", "task_type", "inference_mode",
    "lora_dropout", "init_lora_weights", "loftq_config", "eva_config", "corda_config",
    "lora_ga_config", "peft_version", "megatron_core", "qalora_group_size",
    "layers_to_transform", "layers_pattern", "exclude_modules", "target_modules",
    "ensure_weight_tying",
})

# field -> (the value PEFT's plain LoRA forward needs, why another value is refused)
_MUST_BE = {
    "bias": ("none", "bias terms on the projections are not applied (train with bias=\"none\")"),
    "use_dora": (False, "DoRA (weight-decomposed LoRA) is not applied"),
    "lora_bias": (False, "a bias on lora_B is not applied"),
    "use_qalora": (False, "QA-LoRA is not applied"),
}
_MUST_BE_EMPTY = {
    "modules_to_save": "fully trained copies of modules (often the embedding or LM head) are "
                       "not applied; only low-rank updates of the attention and MLP projections",
    "rank_pattern": "per-module ranks are not applied (one r for every module)",
    "alpha_pattern": "per-module lora_alpha values are not applied (one lora_alpha for every "
                     "module)",
    "layer_replication": "layer replication is not applied",
    "target_parameters": "LoRA on raw parameters (target_parameters) is not applied",
    "trainable_token_indices": "trained token embeddings are not applied",
    "megatron_config": "Megatron-parallel LoRA layers are not applied",
    "alora_invocation_tokens": "activated LoRA (applied only after invocation tokens) is not "
                               "applied",
}
_CHECKED = {"peft_type", "r", "lora_alpha", "use_rslora", "fan_in_fan_out"} | set(_MUST_BE) \
    | set(_MUST_BE_EMPTY)


class AdapterError(ValueError):
    """An adapter cannot be served as it is; the message names the file and the field."""


def _unset(value: Any) -> bool:
    return value is None or value is False or value == "" or value == {} or value == []


@dataclass(frozen=True)
class LoraSpec:
    """The parts of an adapter_config.json that decide the forward (module docstring)."""

    r: int
    lora_alpha: float
    use_rslora: bool = False
    fan_in_fan_out: bool = False
    base_model: str | None = None  # base_model_name_or_path, for the log only

    @property
    def scaling(self) -> float:
        """PEFT's scaling of (x A^T) B^T: lora_alpha / r, or / sqrt(r) with rsLoRA."""
        return self.lora_alpha / (math.sqrt(self.r) if self.use_rslora else self.r)


def parse_lora_config(raw: Any, where: str = CONFIG_FILE) -> LoraSpec:
    """The LoraSpec of a parsed adapter_config.json; AdapterError names the field at fault."""
    if not isinstance(raw, Mapping):
        raise AdapterError(f"{where}: expected a JSON object (a PEFT adapter_config.json)")
    peft_type = raw.get("peft_type")
    if peft_type != "LORA":
        raise AdapterError(f"{where}: peft_type is {peft_type!r}; this server applies LoRA "
                           f"adapters only (peft_type \"LORA\")")
    for name, (wanted, why) in _MUST_BE.items():
        value = raw.get(name, wanted)
        if value != wanted:
            raise AdapterError(f"{where}: {name} is {value!r}: {why}")
    for name, why in _MUST_BE_EMPTY.items():
        if not _unset(raw.get(name)):
            raise AdapterError(f"{where}: {name} is set: {why}")
    for name in sorted(set(raw) - _CHECKED - INERT_FIELDS):
        if not _unset(raw[name]):
            raise AdapterError(f"{where}: {name} is set to {str(raw[name])[:80]}; this server "
                               f"does not know what it changes, so it does not serve the "
                               f"adapter (known fields: docs/lora.md)")
    r = raw.get("r")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise AdapterError(f"{where}: r must be a positive integer, got {r!r}")
    alpha = raw.get("lora_alpha", 8)  # PEFT's default
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) \
            or not math.isfinite(alpha):
        raise AdapterError(f"{where}: lora_alpha must be a number, got {alpha!r}")
    flags = {}
    for name in ("use_rslora", "fan_in_fan_out"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise AdapterError(f"{where}: {name} must be true or false, got {value!r}")
        flags[name] = value
    base = raw.get("base_model_name_or_path")
    return LoraSpec(r, float(alpha), flags["use_rslora"], flags["fan_in_fan_out"],
                    base if isinstance(base, str) else None)


# -- the model.adapters setting -------------------------------------------------------------

# An adapter's name: what ListVoices shows and logs name; never a path (a client never
# names an adapter at all: it picks a voice, and the voice says which adapter speaks it).
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class AdapterSource:
    """One entry of `model.adapters`: the adapter's name, its directory (or hub id) and the
    voices it speaks when its directory has no voices.json (a voices.json path or
    "name[:lang], ..."; None: the directory's voices.json)."""

    name: str
    path: str
    voices: str | None = None


def adapter_sources(value: Any, where: str = "model.adapters") -> tuple[AdapterSource, ...]:
    """The entries of the `model.adapters` setting, in order (the order is each adapter's
    slot in the engine's pool). Accepted forms:

        {name: path, ...}                                  YAML
        {name: {path: ..., voices: "nova:en"}, ...}        YAML, with the voices given
        "name=path, name=path"                             environment or --set

    ValueError naming the entry at fault."""
    if value is None or value == "" or value == {}:
        return ()
    if isinstance(value, str):
        items: list[tuple[Any, Any]] = []
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            name, eq, path = part.partition("=")
            if not eq:
                raise ValueError(f"{where}: {part!r} must be name=path (e.g. "
                                 f"\"nova=/adapters/nova\")")
            items.append((name.strip(), path.strip()))
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise ValueError(f"{where}: expected a mapping of adapter name to directory, got "
                         f"{value!r}")
    out: list[AdapterSource] = []
    seen: set[str] = set()
    for name, entry in items:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"{where}: adapter name {name!r} must be 1 to 64 letters, digits, "
                             f"'_', '.' or '-', starting with a letter or digit")
        if name.casefold() in seen:
            raise ValueError(f"{where}.{name}: named twice")
        seen.add(name.casefold())
        voices = None
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"path", "voices"}
            if unknown:
                raise ValueError(f"{where}.{name}: unknown field(s) {', '.join(sorted(unknown))}"
                                 f" (known: path, voices)")
            voices = entry.get("voices")
            if voices is not None and not isinstance(voices, str):
                raise ValueError(f"{where}.{name}.voices: expected a voices.json path or "
                                 f"\"name:lang, ...\", got {voices!r}")
            entry = entry.get("path")
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"{where}.{name}: expected the adapter's directory (or hub id), "
                             f"got {entry!r}")
        out.append(AdapterSource(name, entry.strip(), voices or None))
    return tuple(out)


def adapter_name_problem(name: Any) -> str | None:
    """Why `name` cannot name an adapter, or None (the rule model.adapters applies)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return (f"adapter name {str(name)[:80]!r} must be 1 to 64 letters, digits, '_', '.' "
                f"or '-', starting with a letter or digit (a name, never a path)")
    return None


def adapter_dirs(value: Any, where: str = "model.adapter_dirs") -> tuple[str, ...]:
    """The directories adapters may be loaded from while serving (the admin service's
    LoadAdapter, docs/lora.md): a YAML list, or "dir, dir" in the environment or a flag.
    Each must be an absolute path (`~` expanded); ValueError naming the entry otherwise."""
    if value is None or value == "" or value == [] or value == ():
        return ()
    if isinstance(value, str):
        items: list[Any] = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"{where}: expected a list of directories, got {value!r}")
    out: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{where}[{i}]: expected a directory, got {item!r}")
        path = item.strip()
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            raise ValueError(f"{where}[{i}]: {path!r} must be an absolute directory (a "
                             f"relative one would depend on the server's working directory)")
        out.append(os.path.normpath(expanded))
    return tuple(out)
