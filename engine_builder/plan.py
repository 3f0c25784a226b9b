"""The build plan: validated flags, model shapes and memory figures. Pure (no tensorrt_llm).

The precision strategy is fixed (docs/tensorrt-llm.md): FP8 (e4m3) weights and activations
for the decoder's linear layers, 16-bit KV cache. Anything else is refused with its reason:

    INT4 / INT8 weights or activations (int4_awq, w4a16, w4a8, int8, int8_sq / smoothquant,
    w8a8, w8a16) and an INT8 KV cache: the seed's precision notes say "DO NOT use INT4/INT8 -
    causes prosody flattening in TTS".
    FP8 KV cache: not the validated strategy (the seeds keep the KV cache at FP16 for quality).
    NVFP4 / no quantization: this builder makes FP8 artifacts only (16-bit runs on
    engine.backend torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from orpheus_svc.engine.trtllm.manifest import (
    FORMAT_CHECKPOINT,
    FORMAT_ENGINE,
    KV_DTYPE_BYTES,
    kv_cache_bytes,
)
from orpheus_svc.models.llama_config import LlamaSpec, orpheus_3b_spec

BACKENDS = ("tensorrt", "pytorch")
PROSODY = ("the seed's precision notes say \"DO NOT use INT4/INT8 - causes prosody flattening "
           "in TTS\"; use FP8 weights with a 16-bit KV cache on an sm89+ GPU, or "
           "engine.backend torch (bfloat16) elsewhere")
_INT_WEIGHTS = {"int4", "int4_awq", "w4a16", "w4a16_awq", "w4a16_gptq", "w4a8", "w4a8_awq",
                "int8", "int8_wo", "w8a16"}
_INT_ACTIVATIONS = {"int8_sq", "smoothquant", "w8a8", "w8a8_sq", "int8_smoothquant"}
_KV_ALIASES = {"fp16": "float16", "float16": "float16", "half": "float16",
               "bf16": "bfloat16", "bfloat16": "bfloat16"}


class PlanError(ValueError):
    """The flags ask for something the builder refuses; `reasons` says why, one per problem."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class BuildRequest:
    """The CLI flags, before validation."""

    model: str
    out: str
    backend: str = "pytorch"
    max_batch_size: int = 32
    max_seq_len: int = 4096
    max_num_tokens: int | None = None
    kv_cache_dtype: str = "fp16"
    quantization: str = "fp8"
    calib_size: int = 512
    calib_dataset: str | None = None


@dataclass(frozen=True)
class BuildPlan:
    model: str
    out: Path
    backend: str
    max_batch_size: int
    max_seq_len: int
    max_num_tokens: int
    kv_cache_dtype: str  # float16 | bfloat16
    calib_size: int
    calib_dataset: str | None
    spec: LlamaSpec
    spec_source: str
    notes: list[str] = field(default_factory=list)

    @property
    def format(self) -> str:
        return FORMAT_ENGINE if self.backend == "tensorrt" else FORMAT_CHECKPOINT

    @property
    def precision(self) -> dict[str, str]:
        return {"weights": "fp8", "activations": "fp8", "kv_cache": self.kv_cache_dtype}

    @property
    def kv_dtype_bytes(self) -> int:
        return KV_DTYPE_BYTES[self.kv_cache_dtype]

    def kv_cache_bytes(self) -> int:
        """slots x layers x 2 x kv_heads x head_dim x max_seq_len x bytes."""
        s = self.spec
        return kv_cache_bytes(slots=self.max_batch_size, layers=s.num_hidden_layers,
                              kv_heads=s.num_key_value_heads, head_dim=s.head_dim,
                              max_seq_len=self.max_seq_len, dtype_bytes=self.kv_dtype_bytes)

    def weight_bytes(self) -> int:
        """Decoder linear layers at 1 byte (FP8); embedding, LM head and norms stay 16-bit."""
        shapes = self.spec.tensor_shapes()
        linear = sum(math.prod(v) for k, v in shapes.items() if k.startswith("model.layers.")
                     and len(v) == 2)
        return linear + 2 * (sum(math.prod(v) for v in shapes.values()) - linear)


def _quantization_problem(name: str) -> str | None:
    q = name.strip().lower()
    if q == "fp8":
        return None
    if q in _INT_WEIGHTS:
        return f"--quantization {name}: INT4/INT8 weight quantization is refused: {PROSODY}"
    if q in _INT_ACTIVATIONS:
        return f"--quantization {name}: INT8 activation quantization is refused: {PROSODY}"
    if q in ("nvfp4", "fp4", "w4a4_nvfp4"):
        return (f"--quantization {name}: 4-bit float weights are not validated for Orpheus "
                f"audio quality; this builder makes FP8 artifacts only")
    return (f"--quantization {name}: not supported; this builder makes FP8 artifacts only "
            f"(for 16-bit weights run engine.backend torch)")


def _kv_problem(name: str) -> str | None:
    kv = name.strip().lower()
    if kv in _KV_ALIASES:
        return None
    if kv in ("int8", "int4"):
        return f"--kv-cache-dtype {name}: an INT8 KV cache is refused: {PROSODY}"
    if kv in ("fp8", "float8", "e4m3"):
        return (f"--kv-cache-dtype {name}: an FP8 KV cache is not the validated strategy "
                f"(the seeds keep the KV cache at FP16 for audio quality); use fp16")
    return f"--kv-cache-dtype {name}: expected fp16 or bf16"


def make_plan(req: BuildRequest, spec: LlamaSpec | None = None, spec_source: str = "") -> BuildPlan:
    """Validate `req` (all problems at once, in PlanError.reasons) and return the plan."""
    if spec is None:
        spec, spec_source = load_spec(req.model)
    reasons = [p for p in (_quantization_problem(req.quantization),
                           _kv_problem(req.kv_cache_dtype)) if p]
    if req.backend not in BACKENDS:
        reasons.append(f"--backend {req.backend}: expected one of {', '.join(BACKENDS)}")
    if req.max_batch_size < 1:
        reasons.append(f"--max-batch-size must be >= 1, got {req.max_batch_size}")
    if not 64 <= req.max_seq_len <= spec.max_position_embeddings:
        reasons.append(f"--max-seq-len must be in 64..{spec.max_position_embeddings} (the "
                       f"model's max_position_embeddings), got {req.max_seq_len}")
    # One iteration must hold a decode token of every slot; 8192 is TensorRT-LLM's default.
    num_tokens = req.max_num_tokens if req.max_num_tokens is not None else max(
        8192, req.max_batch_size)
    if num_tokens < max(req.max_batch_size, 1):
        reasons.append(f"--max-num-tokens {num_tokens} must be >= --max-batch-size "
                       f"{req.max_batch_size} (every slot decodes one token per iteration)")
    if req.calib_size < 1:
        reasons.append(f"--calib-size must be >= 1, got {req.calib_size}")
    if reasons:
        raise PlanError(reasons)
    notes = []
    if req.backend == "tensorrt":
        notes.append("the TensorRT backend is deprecated upstream (removed after 1.2); the "
                     "pytorch backend's FP8 checkpoint is the path that survives upgrades")
    return BuildPlan(model=req.model, out=Path(req.out), backend=req.backend,
                     max_batch_size=req.max_batch_size, max_seq_len=req.max_seq_len,
                     max_num_tokens=num_tokens,
                     kv_cache_dtype=_KV_ALIASES[req.kv_cache_dtype.strip().lower()],
                     calib_size=req.calib_size, calib_dataset=req.calib_dataset, spec=spec,
                     spec_source=spec_source, notes=notes)


def load_spec(model: str) -> tuple[LlamaSpec, str]:
    """Shapes from a local config.json; for a hub id (nothing fetched in a plan), Orpheus-3B's."""
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return LlamaSpec.from_file(path), f"{path / 'config.json'}"
    return orpheus_3b_spec(), "Orpheus-3B shapes (model is not a local directory)"
