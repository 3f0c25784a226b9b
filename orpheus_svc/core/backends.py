"""The engine backends by name, and what the settings need to know of each (pure data).

The config validates `engine.backend` against this table and reads a backend's pacing from
it; the code that builds a backend lives in its own folder, engine/<name>/build.py, found
through engine/registry.py. No other module tests a backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendTraits:
    """name: engine.backend's value. real_time: where its steps run at real time, "always"
    (it paces itself like a GPU, or runs only on one) or "cuda" (on a GPU, not on the CPU):
    decides engine.row_budget=auto. summary: one line for the command line's help."""

    name: str
    real_time: str
    summary: str

    def runs_at_real_time(self, device_type: str) -> bool:
        """Do its steps keep up with real time on `device_type` ("cpu" or "cuda")?"""
        return self.real_time == "always" or (self.real_time == "cuda" and device_type == "cuda")


BACKENDS: dict[str, BackendTraits] = {t.name: t for t in (
    BackendTraits("torch", "cuda", "the eager reference Llama over the KV slot pool (CPU or CUDA)"),
    BackendTraits("graph", "cuda", "the same model in CUDA graphs with run-ahead (the GPU path)"),
    BackendTraits("trtllm", "always", "TensorRT-LLM 1.2 (FP8 weights, 16-bit KV; a GPU only)"),
    BackendTraits("sim", "always", "a GPU timing model, no compute (load tests on a CPU)"),
)}
