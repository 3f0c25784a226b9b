"""Device errors that no later step survives, for the torch-based backends (torch, graph).

After some CUDA errors the context is poisoned: every later call on the device fails the
same way (CUDA's "sticky" errors: an illegal address, a device-side assert, a launch
failure, an uncorrectable ECC error...). Failing only the rows of that step, as EngineLoop
does for an ordinary error, would leave a server that reports SERVING and fails every
generation. A backend raises such an error as FatalBackendError (core/step.py) instead:
the engine thread ends and the server exits for its supervisor to restart it. Running out
of memory is not one of them (the allocator recovers; only that step's rows fail).
"""

from __future__ import annotations

import torch

from orpheus_svc.core.step import FatalBackendError

# cudaGetErrorString texts of the errors that leave the context unusable (CUDA runtime
# API, "cudaError": those documented as "the process must be terminated")
STICKY = ("illegal memory access", "device-side assert", "unspecified launch failure",
          "misaligned address", "illegal instruction", "hardware stack error",
          "uncorrectable ECC error", "invalid program counter")


def device_lost(exc: BaseException) -> bool:
    """Is `exc` a device error that poisons the CUDA context?"""
    if isinstance(exc, torch.OutOfMemoryError):
        return False
    text = str(exc)
    return "CUDA" in text and any(s in text for s in STICKY)


def fatal_if_device_lost(exc: BaseException) -> None:
    """Raise FatalBackendError from `exc` when it poisons the device; else return."""
    if device_lost(exc):
        raise FatalBackendError(f"the CUDA context is lost: {exc}") from exc
