"""GPU checks for the FP8 path, shared by the engine builder and the trtllm backend.

FP8 tensor cores exist from compute capability 8.9 on: Ada Lovelace (sm89: RTX 4090,
L4, L40S) and Hopper (sm90: H100, H200) and newer (Blackwell sm100/sm120). Ampere (A100
sm80, A10/RTX 3090 sm86) has none, so an FP8 engine cannot run there.

The probe uses torch.cuda (torch is installed everywhere this service runs), never
tensorrt_llm, so a dry run can report the GPU on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

FP8_MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    capability: tuple[int, int]
    total_memory_bytes: int = 0

    @property
    def sm(self) -> str:
        return f"sm{self.capability[0]}{self.capability[1]}"


def probe_gpu(index: int = 0) -> GpuInfo | None:
    """The CUDA device `index` as torch sees it, or None when torch sees no CUDA device."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    return GpuInfo(props.name, (props.major, props.minor), int(props.total_memory))


def fp8_problem(gpu: GpuInfo | None) -> str | None:
    """Why FP8 cannot run on `gpu`, or None when it can."""
    if gpu is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return (f"no CUDA GPU is visible{hint}: the FP8 TensorRT-LLM path needs an NVIDIA GPU "
                f"of compute capability {_cc(FP8_MIN_CAPABILITY)} or newer (Ada, Hopper, "
                f"Blackwell) and a CUDA build of torch")
    if gpu.capability < FP8_MIN_CAPABILITY:
        return (f"{gpu.name} is compute capability {_cc(gpu.capability)} ({gpu.sm}); FP8 needs "
                f"{_cc(FP8_MIN_CAPABILITY)} or newer (Ada: RTX 4090 / L4 / L40S, Hopper: H100 / "
                f"H200, Blackwell). On this GPU use engine.backend torch (bfloat16)")
    return None


def _cc(cap: tuple[int, int]) -> str:
    return f"{cap[0]}.{cap[1]}"
