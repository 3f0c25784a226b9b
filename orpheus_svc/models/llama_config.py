"""Llama architecture spec parsed from a Hugging Face `config.json`.

Orpheus-3B is a Llama-3.2-3B fine-tune, so the only architecture we load is
`LlamaForCausalLM`: pre-norm decoder layers (RMSNorm -> GQA attention with RoPE ->
RMSNorm -> SwiGLU MLP), no biases, optional tied embeddings. `LlamaSpec` holds
exactly the fields that decide tensor shapes, RoPE and memory, and refuses configs
that our torch module could not run correctly (a bias, another activation, another
RoPE type) with an error that names the field.

Every checkpoint we serve must contain all Orpheus ids (text, specials and the
7 x 4096 audio ids), so the vocabulary must be at least ORPHEUS_VOCAB_SIZE rows; the
tiny test and demo checkpoints keep the real vocabulary and shrink the width instead.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from orpheus_svc.core.tokens import BOS_ID, END_OF_SPEECH_ID, ORPHEUS_VOCAB_SIZE
from orpheus_svc.files import read_mapping

LLAMA_ARCHITECTURE = "LlamaForCausalLM"
_LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor",
                     "original_max_position_embeddings")
_DTYPES = ("float32", "float16", "bfloat16")


def _positive_int(raw: Mapping[str, Any], key: str, default: Any = None) -> int:
    value = raw.get(key, default)
    # bool is an int subclass; a "true" layer count is a broken config, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def _positive_float(raw: Mapping[str, Any], key: str, default: Any = None,
                    *, prefix: str = "") -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"config.json: {prefix}{key} must be a positive number, got {value!r}")
    return float(value)


def _parse_rope_scaling(value: Any) -> Mapping[str, Any] | None:
    """None, or the Llama-3 scaling dict; anything else is refused by name."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"config.json: rope_scaling must be an object or null, got {value!r}")
    # transformers renamed "type" to "rope_type"; checkpoints in the wild carry either.
    rope_type = value.get("rope_type", value.get("type"))
    if rope_type == "default":
        return None
    if rope_type != "llama3":
        raise ValueError(
            f"config.json: rope_scaling.rope_type {rope_type!r} is not supported "
            f"(only 'llama3', as in Llama-3.2 / Orpheus, or null)")
    parsed: dict[str, Any] = {"rope_type": "llama3"}
    for key in _LLAMA3_ROPE_KEYS:
        if key not in value:
            raise ValueError(f"config.json: rope_scaling.{key} is required for rope_type 'llama3'")
        parsed[key] = _positive_float(value, key, prefix="rope_scaling.")
    parsed["original_max_position_embeddings"] = int(parsed["original_max_position_embeddings"])
    if parsed["high_freq_factor"] <= parsed["low_freq_factor"]:
        raise ValueError("config.json: rope_scaling.high_freq_factor must exceed low_freq_factor")
    return MappingProxyType(parsed)


def _token_ids(value: Any, key: str) -> tuple[int, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"config.json: {key} must be a token id or a list of ids, got {value!r}")
    return tuple(values)


@dataclass(frozen=True)
class LlamaSpec:
    """Shapes and numerics of a Llama checkpoint (see `orpheus_3b_spec()` for the real one).

    `rope_scaling` is None or a read-only mapping with rope_type "llama3", factor,
    low_freq_factor, high_freq_factor and original_max_position_embeddings.
    `torch_dtype` is the dtype the checkpoint was saved in ("bfloat16", ...), or None.
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    torch_dtype: str | None = None
    bos_token_id: int | None = BOS_ID
    eos_token_ids: tuple[int, ...] = field(default=(END_OF_SPEECH_ID,))

    def __post_init__(self) -> None:
        # Validate direct construction the same way as from_dict (one source of truth).
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"config.json: num_attention_heads ({self.num_attention_heads}) must be a "
                f"multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise ValueError(f"config.json: head_dim must be even for RoPE, got {self.head_dim}")
        if self.vocab_size < ORPHEUS_VOCAB_SIZE:
            raise ValueError(
                f"config.json: vocab_size {self.vocab_size} does not cover the Orpheus ids "
                f"(need at least {ORPHEUS_VOCAB_SIZE}: Llama-3 text + specials + 7x4096 audio ids)")
        if self.torch_dtype is not None and self.torch_dtype not in _DTYPES:
            raise ValueError(
                f"config.json: torch_dtype {self.torch_dtype!r} is not one of {', '.join(_DTYPES)}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, MappingProxyType):
            object.__setattr__(self, "rope_scaling", _parse_rope_scaling(dict(self.rope_scaling)))

    def __hash__(self) -> int:  # rope_scaling is a mapping; hash the canonical JSON instead
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    # ---- parsing -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "LlamaSpec":
        """Parse and validate an HF config dict; raises ValueError naming the bad field."""
        archs = raw.get("architectures")
        model_type = raw.get("model_type")
        if archs is not None and list(archs) != [LLAMA_ARCHITECTURE]:
            raise ValueError(
                f"config.json: architectures is {archs!r}; only [{LLAMA_ARCHITECTURE!r}] "
                f"(Llama, as Orpheus-3B) is supported")
        if model_type is not None and model_type != "llama":
            raise ValueError(f"config.json: model_type is {model_type!r}; expected 'llama'")
        if archs is None and model_type is None:
            raise ValueError("config.json: neither architectures nor model_type is set; "
                             f"expected architectures [{LLAMA_ARCHITECTURE!r}]")
        # Fields our module does not implement: refuse rather than compute something else.
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json: hidden_act {raw['hidden_act']!r} is not supported (silu)")
        for key in ("attention_bias", "mlp_bias"):
            if raw.get(key, False):
                raise ValueError(f"config.json: {key}=true is not supported (Llama has no biases)")
        if raw.get("pretraining_tp", 1) not in (1, None):
            raise ValueError("config.json: pretraining_tp other than 1 is not supported")

        hidden = _positive_int(raw, "hidden_size")
        heads = _positive_int(raw, "num_attention_heads")
        if raw.get("head_dim") is None and hidden % heads:
            raise ValueError(f"config.json: hidden_size {hidden} is not divisible by "
                             f"num_attention_heads {heads} and head_dim is not set")
        head_dim = _positive_int(raw, "head_dim", hidden // heads if raw.get("head_dim") is None
                                 else raw["head_dim"])
        # Newer transformers write "dtype" instead of "torch_dtype".
        dtype = raw.get("torch_dtype") or raw.get("dtype")
        # transformers' LlamaConfig defaults to untied (Llama-3.2-1B/3B set true explicitly).
        tie = raw.get("tie_word_embeddings", False)
        if not isinstance(tie, bool):
            raise ValueError(f"config.json: tie_word_embeddings must be true or false, got {tie!r}")
        bos = _token_ids(raw.get("bos_token_id"), "bos_token_id")
        if len(bos) > 1:
            raise ValueError(f"config.json: bos_token_id must be a single id, got {bos!r}")
        return cls(
            hidden_size=hidden,
            intermediate_size=_positive_int(raw, "intermediate_size"),
            num_hidden_layers=_positive_int(raw, "num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=_positive_int(raw, "num_key_value_heads", heads),
            head_dim=head_dim,
            vocab_size=_positive_int(raw, "vocab_size"),
            rms_norm_eps=_positive_float(raw, "rms_norm_eps", 1e-6),
            rope_theta=_positive_float(raw, "rope_theta", 10000.0),
            rope_scaling=_parse_rope_scaling(raw.get("rope_scaling")),
            max_position_embeddings=_positive_int(raw, "max_position_embeddings", 2048),
            tie_word_embeddings=tie,
            torch_dtype=dtype,
            bos_token_id=bos[0] if bos else None,
            eos_token_ids=_token_ids(raw.get("eos_token_id"), "eos_token_id"),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> "LlamaSpec":
        """Parse `config.json` (a file, or a directory that holds one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        raw = read_mapping(path, ValueError, missing=FileNotFoundError)
        try:
            return cls.from_dict(raw)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """An HF `config.json` dict (transformers' LlamaForCausalLM can load it too)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["rope_scaling"] = dict(self.rope_scaling) if self.rope_scaling is not None else None
        eos = out.pop("eos_token_ids")
        out["eos_token_id"] = (eos[0] if len(eos) == 1 else list(eos)) if eos else None
        out.update(architectures=[LLAMA_ARCHITECTURE], model_type="llama", hidden_act="silu",
                   attention_bias=False, mlp_bias=False, attention_dropout=0.0,
                   initializer_range=0.02, pretraining_tp=1, use_cache=True)
        return out

    # ---- derived figures -----------------------------------------------------------------

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor a checkpoint must hold, by HF name (lm_head only when untied)."""
        h, i, q, kv = self.hidden_size, self.intermediate_size, self.q_dim, self.kv_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for n in range(self.num_hidden_layers):
            p = f"model.layers.{n}."
            shapes.update({
                p + "input_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (i, h),
                p + "mlp.up_proj.weight": (i, h),
                p + "mlp.down_proj.weight": (h, i),
            })
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    def num_parameters(self) -> int:
        """Parameter count (a tied LM head is counted once)."""
        return sum(math.prod(s) for s in self.tensor_shapes().values())

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV cache bytes for one token of one sequence: layers x 2 (K, V) x kv_heads x head_dim x bytes."""
        return self.num_hidden_layers * 2 * self.num_key_value_heads * self.head_dim * dtype_bytes

    def rope_inv_freq(self) -> list[float]:
        """RoPE inverse frequencies (head_dim / 2 of them), with Llama-3 scaling applied.

        Llama-3 scaling keeps high frequencies (wavelength < original / high_freq_factor),
        divides low ones (wavelength > original / low_freq_factor) by `factor`, and blends
        linearly in between; this mirrors transformers' `_compute_llama3_parameters`.
        """
        base = [1.0 / self.rope_theta ** (k / self.head_dim) for k in range(0, self.head_dim, 2)]
        rs = self.rope_scaling
        if rs is None:
            return base
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        original = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = original / low, original / high
        out = []
        for f in base:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / factor)
            else:
                smooth = (original / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return out


def orpheus_3b_spec() -> LlamaSpec:
    """The real Orpheus-3B (Llama-3.2-3B) shapes, for memory math and benchmarks."""
    return LlamaSpec(
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=ORPHEUS_VOCAB_SIZE,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        bos_token_id=BOS_ID,
        eos_token_ids=(END_OF_SPEECH_ID,),
    )
