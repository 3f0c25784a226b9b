"""Run a build plan: output dir, model files, the build itself, tokenizer copy, manifest."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.metadata
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from orpheus_svc.engine.trtllm.gpu import GpuInfo
from orpheus_svc.engine.trtllm.manifest import Limits, Manifest

from .plan import BuildPlan

# The runtime encodes prompts itself (TensorRT-LLM gets token ids), so the artifact must
# carry the tokenizer it was built from; and the model's voice list when it has one
# (voices.json, read by orpheus_svc/models/voices.py).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "voices.json")
_NEEDS = {"tensorrt": ("tensorrt_llm",), "pytorch": ("modelopt", "transformers")}


class BuildEnvironmentError(RuntimeError):
    """This machine cannot run the build (missing package, output dir in use)."""


def check_packages(backend: str) -> None:
    for name in _NEEDS[backend]:
        try:
            importlib.import_module(name)
        except Exception as exc:  # ImportError, or a broken CUDA install raising at import
            # ModelOpt and transformers at the versions TensorRT-LLM 1.2 pins (the extra):
            # an unpinned ModelOpt breaks the FP8 export
            pip = {"tensorrt_llm": "tensorrt-llm~=1.2.0", "modelopt": "orpheus-svc[build]",
                   "transformers": "orpheus-svc[build]"}[name]
            raise BuildEnvironmentError(
                f"--backend {backend} needs the {name} package ({exc.__class__.__name__}: "
                f"{exc}); pip install '{pip}'") from exc


def prepare_out(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise BuildEnvironmentError(f"--out {out} is not empty; pass --force to replace it")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("tensorrt-llm", "nvidia-modelopt", "torch", "transformers", "orpheus-svc"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    try:
        import torch
        out["cuda"] = torch.version.cuda
    except ImportError:  # pragma: no cover
        out["cuda"] = None
    return out


def run_build(plan: BuildPlan, gpu: GpuInfo, *, force: bool = False) -> Path:
    """Build plan.out and write its manifest; returns the manifest path."""
    from orpheus_svc.hub import resolve_checkpoint
    from orpheus_svc.models.loader import CHECKPOINT_PATTERNS  # imports torch: only for builds

    check_packages(plan.backend)
    model_dir = resolve_checkpoint(plan.model, CHECKPOINT_PATTERNS, what="--model")
    prepare_out(plan.out, force)
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    if plan.backend == "tensorrt":
        from .build_trt import build_engine
        extra = build_engine(plan, model_dir)
    else:
        from .build_pytorch import build_checkpoint
        extra = build_checkpoint(plan, model_dir)
    for name in TOKENIZER_FILES:
        if (model_dir / name).is_file():
            shutil.copy2(model_dir / name, plan.out / name)
    return manifest_for(plan, gpu, extra, started, time.monotonic() - t0).write(plan.out)


def manifest_for(plan: BuildPlan, gpu: GpuInfo | None, extra: dict[str, Any],
                 started: dt.datetime, seconds: float) -> Manifest:
    return Manifest(
        format=plan.format, model=plan.model, precision=plan.precision,
        limits=Limits(plan.max_batch_size, plan.max_seq_len, plan.max_num_tokens),
        versions={**versions(), **extra.get("versions", {})},
        gpu={} if gpu is None else {"name": gpu.name, "compute_capability": gpu.sm},
        build_time=started.isoformat(timespec="seconds"), build_seconds=round(seconds, 1),
        calibration=extra.get("calibration", {}))
