"""Read a PEFT LoRA adapter directory (the Hugging Face layout `save_pretrained` writes):

    <dir>/adapter_config.json         core/lora_config.py decides what it may say
    <dir>/adapter_model.safetensors   lora_A / lora_B of each adapted projection
    <dir>/voices.json                 the voices it speaks (core/voices.py), unless the
                                      model.adapters entry names them

Weights are keyed as PEFT saves them,

    base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight
    base_model.model.model.layers.{i}.mlp.{gate,up,down}_proj.lora_{A,B}.weight

with A [r, in] and B [out, r] against the base projection's [out, in]. Every problem is
found from the safetensors header (names, shapes, dtypes) before any tensor is read, and
raised as AdapterError naming the file and the tensor or field: a wrong adapter fails in
milliseconds and changes nothing. Never a pickle (adapter_model.bin is refused).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from orpheus_svc.core.lora_config import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    AdapterError,
    LoraSpec,
    parse_lora_config,
)
from orpheus_svc.core.voices import VOICES_FILE, VoiceRegistry, VoiceRegistryError, registry_from_setting
from orpheus_svc.files import read_mapping
from orpheus_svc.models.llama_config import LlamaSpec
from orpheus_svc.models.voices import read_voices_file

# The projections an adapter may adapt, in the order the engine fuses them (q, k, v | o |
# gate, up | down: engine/model/llama.py).
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
ADAPTER_PATTERNS = (CONFIG_FILE, WEIGHTS_FILE, VOICES_FILE)  # what a hub download fetches

_KEY_RE = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.("
                     + "|".join(re.escape(p) for p in PROJECTIONS) + r")\.lora_([AB])\.weight$")
_DTYPES = {"F32", "F16", "BF16", "F64"}


@dataclass
class AdapterWeights:
    """A validated adapter: its config, its voices and, per layer and projection, (A, B) as
    float32 CPU tensors, unscaled (the pool folds `spec.scaling` into B)."""

    path: Path
    spec: LoraSpec
    layers: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]]
    voices: VoiceRegistry

    @property
    def modules(self) -> list[str]:
        """The adapted projections (short names: q_proj, ..., down_proj)."""
        found = {m for layer in self.layers.values() for m in layer}
        return [p.split(".")[1] for p in PROJECTIONS if p in found]

    def info(self) -> dict:
        """What the start-up log says about it."""
        return {"rank": self.spec.r, "lora_alpha": self.spec.lora_alpha,
                "use_rslora": self.spec.use_rslora, "scaling": self.spec.scaling,
                "modules": self.modules, "layers": len(self.layers),
                "base_model": self.spec.base_model or ""}


def _shape_problem(key: str, shape: tuple[int, ...], want: tuple[int, int]) -> str | None:
    if tuple(shape) != want:
        return f"{key} has shape {list(shape)}, the base model needs {list(want)}"
    return None


def read_adapter(path: str | Path, base: LlamaSpec | None, max_rank: int, *,
                 voices: str | VoiceRegistry | None = None) -> AdapterWeights:
    """The adapter in directory `path`, checked against the base model `base` (None: shapes
    are not checked, for a backend without weights: the sim) and against `max_rank`
    (engine.max_lora_rank). `voices`: the adapter's voices given by the caller (a voices.json
    path or "name[:lang], ..." from the config; a VoiceRegistry already parsed: the admin
    service's, never a path a client chose), else the directory's voices.json. AdapterError
    otherwise. The same checks at start-up (model.adapters) and for the admin service."""
    root = Path(path)
    if not root.is_dir():
        raise AdapterError(f"{root}: not a directory (a PEFT adapter directory holds "
                           f"{CONFIG_FILE} and {WEIGHTS_FILE})")
    spec = parse_lora_config(read_mapping(root / CONFIG_FILE, AdapterError),
                             str(root / CONFIG_FILE))
    if spec.r > max_rank:
        raise AdapterError(f"{root / CONFIG_FILE}: r is {spec.r}, above this server's "
                           f"engine.max_lora_rank {max_rank}")
    weights = root / WEIGHTS_FILE
    if not weights.is_file():
        pickled = " (adapter_model.bin is a pickle: never loaded; save with safetensors)" \
            if (root / "adapter_model.bin").exists() else ""
        raise AdapterError(f"{root}: {WEIGHTS_FILE} is missing{pickled}")
    layers = _read_weights(weights, spec, base)
    return AdapterWeights(root, spec, layers, _voices(root, voices))


def _read_weights(path: Path, spec: LoraSpec, base: LlamaSpec | None
                  ) -> dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    where = str(path)
    shapes = base.tensor_shapes() if base is not None else {}
    try:
        f = safe_open(str(path), framework="pt")
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: say so
        raise AdapterError(f"{where}: not a readable safetensors file ({exc})") from None
    with f:
        found: dict[tuple[int, str], dict[str, str]] = {}
        for key in f.keys():
            m = _KEY_RE.match(key)
            if m is None:
                raise AdapterError(f"{where}: tensor {key} is not a lora_A/lora_B weight of an "
                                   f"attention or MLP projection; {_why_not(key)}")
            layer, module, ab = int(m.group(1)), m.group(2), m.group(3)
            sl = f.get_slice(key)
            if sl.get_dtype() not in _DTYPES:
                raise AdapterError(f"{where}: {key} is {sl.get_dtype()}; expected F32, F16 or BF16")
            shape = tuple(sl.get_shape())
            if base is not None:
                if layer >= base.num_hidden_layers:
                    raise AdapterError(f"{where}: {key} adapts layer {layer}, the base model has "
                                       f"{base.num_hidden_layers} layers")
                out, inp = shapes[f"model.layers.{layer}.{module}.weight"]
                want = (spec.r, inp) if ab == "A" else (out, spec.r)
                problem = _shape_problem(key, shape, want)
            else:
                problem = None if len(shape) == 2 and shape[0 if ab == "A" else 1] == spec.r \
                    else f"{key} has shape {list(shape)}, not rank r={spec.r}"
            if problem:
                raise AdapterError(f"{where}: {problem} (r={spec.r} in {CONFIG_FILE})")
            found.setdefault((layer, module), {})[ab] = key
        if not found:
            raise AdapterError(f"{where}: no lora_A/lora_B weights in it")
        layers: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
        for (layer, module), keys in sorted(found.items()):
            if set(keys) != {"A", "B"}:
                missing = "lora_B" if "A" in keys else "lora_A"
                raise AdapterError(f"{where}: model.layers.{layer}.{module} has no {missing}")
            layers.setdefault(layer, {})[module] = (f.get_tensor(keys["A"]).float(),
                                                    f.get_tensor(keys["B"]).float())
    return layers


def _why_not(key: str) -> str:
    if "embed" in key:
        return "embedding adapters are not applied"
    if "lm_head" in key:
        return "LM-head adapters are not applied"
    if "magnitude" in key:
        return "DoRA magnitude vectors are not applied"
    if key.endswith(".bias"):
        return "bias terms are not applied"
    return "this server applies only q, k, v, o, gate, up and down projection adapters"


def _voices(root: Path, given: str | VoiceRegistry | None) -> VoiceRegistry:
    if isinstance(given, VoiceRegistry):
        return given
    try:
        if given:
            candidate = Path(given).expanduser()
            if candidate.suffix == ".json" or candidate.is_file():
                return read_voices_file(candidate)
            return registry_from_setting(given, source=f"the voices given for {root}")
        if (root / VOICES_FILE).is_file():
            return read_voices_file(root / VOICES_FILE)
    except VoiceRegistryError as exc:
        raise AdapterError(str(exc)) from None
    raise AdapterError(f"{root}: the adapter brings no voices: add a {VOICES_FILE} beside it "
                       f"(docs/voices.md) or name its voice where it is loaded "
                       f"(model.adapters: {{name: {{path: ..., voices: \"name\"}}}})")


# -- where the admin service may read adapters from (model.adapter_dirs) --------------------

# Every file read_adapter may open in an adapter directory: each must resolve inside the
# same allowed directory as the adapter directory itself.
_READ_FILES = (CONFIG_FILE, WEIGHTS_FILE, VOICES_FILE, "adapter_model.bin")


class AdapterPathError(AdapterError):
    """A path the admin service may not read: `outside` True when it resolves outside every
    model.adapter_dirs entry (PERMISSION_DENIED), False when it is no usable path at all
    (not absolute, empty: INVALID_ARGUMENT)."""

    def __init__(self, message: str, outside: bool) -> None:
        super().__init__(message)
        self.outside = outside


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_inside(path: str, dirs: tuple[str, ...]) -> Path:
    """The real path of adapter directory `path` (absolute; every symlink followed, `..`
    resolved: os.path.realpath), when it lies inside one of `dirs` (model.adapter_dirs, each
    resolved the same way), and so does every file read_adapter may open in it (a
    symlinked adapter_model.safetensors may not point out either). AdapterPathError
    otherwise. Read the adapter from the path returned, never from `path`."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise AdapterPathError("path is empty: give the adapter's directory (absolute, inside "
                               "model.adapter_dirs)", outside=False)
    given = Path(path)
    if not given.is_absolute():
        raise AdapterPathError(f"path {path[:200]!r} is not absolute: give the adapter "
                               f"directory's absolute path (inside model.adapter_dirs)",
                               outside=False)
    real = Path(os.path.realpath(given))
    roots = [Path(os.path.realpath(d)) for d in dirs]
    root = next((r for r in roots if _inside(real, r)), None)
    allowed = ", ".join(str(r) for r in roots) or "none"
    if root is None:
        shown = f"{path[:200]!r}" + (f" resolves to {str(real)!r}, which is" if str(real) != path
                                     else " is")
        raise AdapterPathError(f"path {shown} outside model.adapter_dirs ({allowed}): the "
                               f"server reads adapters only from those directories",
                               outside=True)
    for name in _READ_FILES:
        f = real / name
        if os.path.lexists(f):
            target = Path(os.path.realpath(f))
            if not _inside(target, root):
                raise AdapterPathError(f"{f} resolves to {str(target)!r}, outside "
                                       f"model.adapter_dirs ({allowed}): every file of an "
                                       f"adapter must lie inside them", outside=True)
    return real


# -- the adapters model.adapters names ------------------------------------------------------

# engine.max_lora_rank 0 (auto) reads adapters up to this rank, then sizes the pool to them
AUTO_RANK_CAP = 512


@dataclass
class ConfiguredAdapters:
    """model.adapters, read and checked: each adapter in its pool slot's order, and the
    pool's size (engine.max_adapters and engine.max_lora_rank, or what they resolve to)."""

    adapters: list[tuple[str, AdapterWeights]]
    capacity: int
    rank: int

    @property
    def served(self) -> tuple[tuple[str, VoiceRegistry], ...]:
        """(name, voices) of each adapter, in slot order (engine/registry.py BuiltBackend)."""
        return tuple((name, w.voices) for name, w in self.adapters)

    @property
    def details(self) -> tuple[tuple[str, int], ...]:
        """(directory, rank) of each adapter, in slot order (the admin service lists them)."""
        return tuple((str(w.path), w.spec.r) for _, w in self.adapters)

    def install(self, pool) -> None:
        """Each adapter into its slot of `pool` (engine/model/lora.py LoraPool)."""
        for index, (_, weights) in enumerate(self.adapters):
            pool.install(index, weights.layers, weights.spec.scaling)


def read_configured_adapters(config, base: LlamaSpec | None) -> ConfiguredAdapters:
    """Every adapter model.adapters names, read and checked against the base model `base`
    (None: no shapes to check, the sim), and the pool size. ConfigError naming the entry
    (model.adapters.<name>) or the setting (engine.max_adapters) at fault: the server does
    not start with an adapter it cannot serve exactly."""
    from orpheus_svc.config import ConfigError
    from orpheus_svc.core.lora_config import adapter_dirs, adapter_sources
    from orpheus_svc.hub import CheckpointNotFoundError, resolve_checkpoint

    e = config.engine
    sources = adapter_sources(config.model.adapters)
    cap = e.max_lora_rank or AUTO_RANK_CAP
    read: list[tuple[str, AdapterWeights]] = []
    for src in sources:
        where = f"model.adapters.{src.name}"
        try:
            root = resolve_checkpoint(src.path, ADAPTER_PATTERNS, what=f"{where} ({src.path})")
            read.append((src.name, read_adapter(root, base, cap, voices=src.voices)))
        except (AdapterError, CheckpointNotFoundError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    capacity = e.max_adapters or len(read)
    dirs = adapter_dirs(config.model.adapter_dirs)
    if dirs and not (e.max_adapters and e.max_lora_rank):
        raise ConfigError("model.adapter_dirs is set (adapters may be loaded while serving), "
                          "so the adapter pool must be sized for them: set both "
                          "engine.max_adapters and engine.max_lora_rank above 0 (now "
                          f"{e.max_adapters} and {e.max_lora_rank})")
    for d in dirs:
        if not os.path.isdir(d):
            raise ConfigError(f"model.adapter_dirs: {d} is not a directory")
    if len(read) > capacity:
        raise ConfigError(f"engine.max_adapters is {e.max_adapters}, but model.adapters names "
                          f"{len(read)} adapters")
    rank = e.max_lora_rank or max((w.spec.r for _, w in read), default=0)
    return ConfiguredAdapters(read, capacity if rank else 0, rank)
