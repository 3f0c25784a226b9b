"""The build manifest shared by `orpheus-build-engine` (writer) and the trtllm backend (reader).

An artifact directory made by the builder holds the engine or checkpoint plus one JSON file:

    <out>/orpheus_manifest.json
        format          "tensorrt-engine" (TensorRT backend, deprecated upstream) or
                        "fp8-hf-checkpoint" (ModelOpt export for TensorRT-LLM's PyTorch backend)
        model           the source checkpoint (directory or hub id)
        precision       {"weights": "fp8", "activations": "fp8", "kv_cache": "float16"}
        limits          {"max_batch_size", "max_seq_len", "max_num_tokens"}
        versions        tensorrt_llm / modelopt / torch / cuda / python / orpheus_svc
        gpu             {"name", "compute_capability"} of the build machine
        build_time      ISO-8601 UTC; build_seconds: wall time of the build
        calibration     {"samples": N, "source": "..."}

A TensorRT engine is compiled for its limits: the runtime refuses a config that asks for
more slots or a longer context than the engine was built for. A PyTorch-backend checkpoint
has no compiled limits; its recorded limits are what it was planned for.

Pure Python (no torch, no tensorrt_llm) so the dry run and the tests can use it anywhere.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from orpheus_svc.files import read_mapping

MANIFEST_NAME = "orpheus_manifest.json"
FORMAT_ENGINE = "tensorrt-engine"
FORMAT_CHECKPOINT = "fp8-hf-checkpoint"
FORMATS = (FORMAT_ENGINE, FORMAT_CHECKPOINT)
MANIFEST_VERSION = 1

# Bytes per element of the KV cache dtypes the builder accepts (see engine_builder/plan.py).
KV_DTYPE_BYTES = {"float16": 2, "bfloat16": 2}


class ManifestError(ValueError):
    """The manifest is missing, unreadable or incomplete; the message names the file and field."""


def kv_cache_bytes(*, slots: int, layers: int, kv_heads: int, head_dim: int, max_seq_len: int,
                   dtype_bytes: int = 2) -> int:
    """KV cache for `slots` full-length sequences:

        slots x layers x 2 (K and V) x kv_heads x head_dim x max_seq_len x bytes

    Orpheus-3B, 32 slots x 4096 tokens, FP16: 32 x 28 x 2 x 8 x 128 x 4096 x 2 = 15.03 GB
    (14.0 GiB). TensorRT-LLM's paged cache allocates a pool from free memory instead
    (kv free-memory fraction), so this is the pool needed to hold every slot at full length.
    """
    return slots * layers * 2 * kv_heads * head_dim * max_seq_len * dtype_bytes


@dataclass(frozen=True)
class Limits:
    max_batch_size: int
    max_seq_len: int
    max_num_tokens: int

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Limits":
        """Every field as an int; KeyError names a missing one, TypeError/ValueError a bad one."""
        return cls(**{f.name: int(raw[f.name]) for f in fields(cls)})


@dataclass(frozen=True)
class Manifest:
    format: str
    model: str
    precision: dict[str, str]
    limits: Limits
    versions: dict[str, str | None] = field(default_factory=dict)
    gpu: dict[str, Any] = field(default_factory=dict)
    build_time: str = ""
    build_seconds: float = 0.0
    calibration: dict[str, Any] = field(default_factory=dict)
    manifest_version: int = MANIFEST_VERSION

    @property
    def runtime(self) -> str:
        """Which TensorRT-LLM LLM class loads this artifact: "tensorrt" or "pytorch"."""
        return "tensorrt" if self.format == FORMAT_ENGINE else "pytorch"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, out_dir: str | Path) -> Path:
        path = Path(out_dir) / MANIFEST_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = MANIFEST_NAME) -> "Manifest":
        try:
            fmt = raw["format"]
            parsed = Limits.from_dict(raw["limits"])
            model, precision = str(raw["model"]), dict(raw["precision"])
        except KeyError as exc:
            raise ManifestError(f"{where}: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: malformed limits or precision: {exc}") from None
        if fmt not in FORMATS:
            raise ManifestError(f"{where}: format {fmt!r} is not one of {', '.join(FORMATS)}")
        return cls(format=fmt, model=model, precision=precision, limits=parsed,
                   versions=dict(raw.get("versions") or {}), gpu=dict(raw.get("gpu") or {}),
                   build_time=str(raw.get("build_time", "")),
                   build_seconds=float(raw.get("build_seconds", 0.0)),
                   calibration=dict(raw.get("calibration") or {}),
                   manifest_version=int(raw.get("manifest_version", MANIFEST_VERSION)))


def read_manifest(artifact_dir: str | Path) -> Manifest:
    """The manifest of a builder output directory; ManifestError naming what is wrong."""
    path = Path(artifact_dir) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(
            f"{path} not found: {artifact_dir} was not made by orpheus-build-engine (build "
            f"one with: orpheus-build-engine --model <orpheus dir or id> --out {artifact_dir})")
    return Manifest.from_dict(read_mapping(path, ManifestError), str(path))
