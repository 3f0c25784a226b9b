"""Load and write Llama checkpoints in the Hugging Face layout.

    <dir>/config.json                      LlamaSpec (architectures: LlamaForCausalLM)
    <dir>/model.safetensors                one file, or
    <dir>/model-0000k-of-0000N.safetensors shards + model.safetensors.index.json (weight_map)
    <dir>/tokenizer.json                   TextTokenizer

The state dict keeps the HF tensor names (`model.embed_tokens.weight`,
`model.layers.{i}.self_attn.q_proj.weight`, ...). With tied embeddings it has no
`lm_head.weight`; `LoadedCheckpoint.lm_head_weight` returns the tensor to use either way.

Every problem is reported before any tensor data is read: headers give names, shapes
and dtypes, so a wrong checkpoint fails in milliseconds with the tensor named.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from orpheus_svc.hub import resolve_checkpoint
from orpheus_svc.models.llama_config import LlamaSpec
from orpheus_svc.models.tokenizer import BOS_TOKEN, TextTokenizer

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CHECKPOINT_PATTERNS = ("config.json", "*.safetensors", INDEX_FILE, "tokenizer.json",
                       "tokenizer_config.json", "special_tokens_map.json",
                       "voices.json")  # the model's voice list, when it ships one (models/voices.py)
# Buffers older transformers versions saved next to the weights; recomputed from the config.
_IGNORED_RE = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")
_FLOAT_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class CheckpointError(ValueError):
    """The checkpoint exists but is incomplete or does not match its config; names the part."""


@dataclass
class LoadedCheckpoint:
    """A loaded checkpoint: spec, HF-named tensors on the target device, tokenizer, directory."""

    spec: LlamaSpec
    state_dict: dict[str, torch.Tensor]
    tokenizer: TextTokenizer
    path: Path

    @property
    def lm_head_weight(self) -> torch.Tensor:
        """[vocab, hidden] output projection: lm_head.weight, or the embedding when tied."""
        if self.spec.tie_word_embeddings:
            return self.state_dict["model.embed_tokens.weight"]
        return self.state_dict["lm_head.weight"]


def to_torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch dtype from a dtype or a name ("bfloat16", "fp16", ...)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPE_NAMES[str(dtype).lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(_DTYPE_NAMES)}") from None


def _index_weight_map(path: Path) -> dict[str, str]:
    index_path = path / INDEX_FILE
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{index_path}: not a valid safetensors index ({exc!r})") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index_path}: weight_map is empty")
    missing = sorted({f for f in weight_map.values() if not (path / f).is_file()})
    if missing:
        raise CheckpointError(f"{path}: shard(s) named in {INDEX_FILE} are missing: "
                              f"{', '.join(missing)}")
    return weight_map


def _tensor_files(path: Path) -> dict[str, str]:
    """name -> file for every tensor; HF's rule: model.safetensors first, then the index."""
    if (path / SINGLE_FILE).is_file():
        with safe_open(path / SINGLE_FILE, framework="pt") as f:
            return {name: SINGLE_FILE for name in f.keys()}
    if (path / INDEX_FILE).is_file():
        weight_map = _index_weight_map(path)
        for shard in sorted(set(weight_map.values())):
            with safe_open(path / shard, framework="pt") as f:
                present = set(f.keys())
            absent = sorted(n for n, s in weight_map.items() if s == shard and n not in present)
            if absent:
                raise CheckpointError(f"{path / shard}: tensor {absent[0]!r} is listed in "
                                      f"{INDEX_FILE} but not stored in this shard"
                                      + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""))
        return dict(weight_map)
    shards = sorted(p.name for p in path.glob("*.safetensors"))
    if shards:
        raise CheckpointError(f"{path}: found {', '.join(shards[:3])} but neither {SINGLE_FILE} "
                              f"nor {INDEX_FILE}")
    raise CheckpointError(f"{path}: no {SINGLE_FILE} or {INDEX_FILE} (PyTorch .bin checkpoints are "
                          "not supported; convert them to safetensors)")


def _check_names_and_shapes(spec: LlamaSpec, shapes: Mapping[str, tuple[int, ...]],
                            where: str) -> None:
    expected = spec.tensor_shapes()
    missing = [n for n in expected if n not in shapes]
    if missing:
        hint = (" (config.json has tie_word_embeddings=false; set it to true if the head is tied)"
                if missing[0] == "lm_head.weight" else "")
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: tensor {missing[0]!r}{more} missing{hint}")
    for name, want in expected.items():
        if tuple(shapes[name]) != want:
            raise CheckpointError(f"{where}: tensor {name!r} has shape {list(shapes[name])}, "
                                  f"config.json implies {list(want)}")
    unexpected = sorted(n for n in shapes if n not in expected and not _IGNORED_RE.fullmatch(n)
                        and not (n == "lm_head.weight" and spec.tie_word_embeddings))
    if unexpected:
        raise CheckpointError(f"{where}: unexpected tensor(s) {', '.join(unexpected[:5])} "
                              "(not part of a Llama model with this config.json)")


def default_dtype(spec: LlamaSpec, device: torch.device) -> torch.dtype | None:
    """float32 on CPU (half-precision matmuls there are slow or unsupported); on an
    accelerator the checkpoint's torch_dtype, or None to keep the stored dtype."""
    if device.type == "cpu":
        return torch.float32
    return to_torch_dtype(spec.torch_dtype) if spec.torch_dtype else None


def load_checkpoint(ref: str | os.PathLike[str], *, device: str | torch.device = "cpu",
                    dtype: torch.dtype | str | None = None) -> LoadedCheckpoint:
    """Load a Llama checkpoint (local directory or hub id) onto `device`, cast to `dtype`.

    dtype=None picks `default_dtype`: float32 on CPU, the config's torch_dtype on CUDA.
    A tied checkpoint that also stores lm_head.weight loads without it (the embedding is
    the head, as in transformers). Raises CheckpointNotFoundError when `ref` cannot be
    found, CheckpointError / ValueError when it is incomplete or not an Orpheus Llama.
    """
    path = resolve_checkpoint(ref, list(CHECKPOINT_PATTERNS), what="model checkpoint")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: config.json missing (not a checkpoint in the HF layout?)")
    try:
        spec = LlamaSpec.from_file(path / "config.json")
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        tokenizer = TextTokenizer.from_file(path / "tokenizer.json")
    except (FileNotFoundError, ValueError) as exc:
        raise CheckpointError(str(exc)) from None
    if tokenizer.max_id() >= spec.vocab_size:
        raise CheckpointError(f"{path}: tokenizer.json has id {tokenizer.max_id()} but the model "
                              f"has only {spec.vocab_size} embedding rows")

    device = torch.device(device)
    target = to_torch_dtype(dtype) if dtype is not None else default_dtype(spec, device)
    files = _tensor_files(path)
    by_file: dict[str, list[str]] = {}
    for name, file in files.items():
        by_file.setdefault(file, []).append(name)

    shapes: dict[str, tuple[int, ...]] = {}
    for file, names in by_file.items():
        with safe_open(path / file, framework="pt") as f:
            for name in names:
                sl = f.get_slice(name)
                if sl.get_dtype() not in _FLOAT_DTYPES:
                    raise CheckpointError(f"{path / file}: tensor {name!r} has dtype "
                                          f"{sl.get_dtype()}; expected F32, F16 or BF16")
                shapes[name] = tuple(sl.get_shape())
    _check_names_and_shapes(spec, shapes, str(path))

    wanted = spec.tensor_shapes()
    if spec.tie_word_embeddings and "lm_head.weight" in files:
        log.info("%s: tied embeddings; ignoring the stored lm_head.weight", path)
    state_dict: dict[str, torch.Tensor] = {}
    for file, names in sorted(by_file.items()):
        with safe_open(path / file, framework="pt", device="cpu") as f:
            for name in names:
                if name in wanted:  # one tensor at a time keeps peak host memory at one copy
                    state_dict[name] = f.get_tensor(name).to(device=device, dtype=target)
    return LoadedCheckpoint(spec=spec, state_dict=state_dict, tokenizer=tokenizer, path=path)


def _shard(names: list[str], sizes: Mapping[str, int], max_bytes: int | None) -> list[list[str]]:
    """Greedy split in name order; a tensor larger than max_bytes gets a shard of its own."""
    if max_bytes is None:
        return [names]
    shards: list[list[str]] = [[]]
    used = 0
    for name in names:
        if shards[-1] and used + sizes[name] > max_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += sizes[name]
    return shards


def write_checkpoint(out_dir: str | os.PathLike[str], spec: LlamaSpec,
                     state_dict: Mapping[str, torch.Tensor], tokenizer_json: str, *,
                     max_shard_bytes: int | None = None) -> Path:
    """Write `state_dict` (HF names, shapes per `spec`) as a checkpoint in the HF layout.

    One model.safetensors, or shards of at most `max_shard_bytes` plus the index. Tensors
    are stored in their own dtype. With tied embeddings an lm_head.weight equal to the
    embedding is dropped. `out_dir` must not already hold a checkpoint. Returns out_dir.
    """
    out = Path(out_dir)
    if max_shard_bytes is not None and max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes must be positive, got {max_shard_bytes}")
    if out.exists() and ((out / "config.json").exists() or any(out.glob("*.safetensors"))):
        raise FileExistsError(f"{out}: already holds a checkpoint; write into an empty directory")
    tensors = dict(state_dict)
    if spec.tie_word_embeddings and "lm_head.weight" in tensors:
        embed = tensors.get("model.embed_tokens.weight")
        if embed is not None and not torch.equal(tensors["lm_head.weight"], embed):
            raise CheckpointError("tie_word_embeddings is true but lm_head.weight differs from "
                                  "model.embed_tokens.weight")
        del tensors["lm_head.weight"]
    _check_names_and_shapes(spec, {n: tuple(t.shape) for n, t in tensors.items()}, "state_dict")
    TextTokenizer.from_str(tokenizer_json)  # refuse to write a checkpoint we could not load

    names = list(spec.tensor_shapes())  # layer order, so shards hold whole neighbouring layers
    sizes = {n: tensors[n].numel() * tensors[n].element_size() for n in names}
    shards = _shard(names, sizes, max_shard_bytes)
    out.mkdir(parents=True, exist_ok=True)
    if len(shards) == 1:
        files = {SINGLE_FILE: shards[0]}
    else:
        files = {f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors": s
                 for k, s in enumerate(shards)}
    for file, shard_names in files.items():
        save_file({n: tensors[n].detach().to("cpu").contiguous() for n in shard_names},
                  str(out / file), metadata={"format": "pt"})
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())},
                 "weight_map": {n: file for file, ns in files.items() for n in ns}}
        _write_json(out / INDEX_FILE, index)
    _write_json(out / "config.json", spec.to_dict())
    (out / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS_TOKEN,
        "eos_token": "<|eot_id|>", "model_max_length": spec.max_position_embeddings,
        "clean_up_tokenization_spaces": True})
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS_TOKEN, "eos_token": "<|eot_id|>"})
    return out


def _write_json(path: Path, obj: object) -> None:
    # sort_keys + fixed indent: byte-identical files for identical content (demo hash).
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
