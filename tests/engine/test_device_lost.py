"""A CUDA error that poisons the context is raised as FatalBackendError by the torch-based
backends (engine/model/device.py), so EngineLoop ends instead of failing rows forever; an
out-of-memory error and ordinary errors stay row errors (issue 36)."""

import pytest
import torch

from orpheus_svc.core.step import FatalBackendError, StepPlan
from orpheus_svc.engine.model.device import device_lost, fatal_if_device_lost


@pytest.mark.parametrize("exc, lost", [
    (RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
                  "might be asynchronously reported"), True),
    (RuntimeError("CUDA error: device-side assert triggered"), True),
    (RuntimeError("CUDA error: unspecified launch failure"), True),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (RuntimeError("CUDA error: invalid argument"), False),
    (ValueError("a bad row"), False),
])
def test_which_device_errors_are_fatal(exc, lost):
    assert device_lost(exc) is lost
    if lost:
        with pytest.raises(FatalBackendError) as err:
            fatal_if_device_lost(exc)
        assert err.value.__cause__ is exc
    else:
        fatal_if_device_lost(exc)  # returns: the caller re-raises the row error


def test_the_torch_backend_raises_a_lost_device_as_fatal(monkeypatch):
    from orpheus_svc.engine.torch.backend import TorchBackend

    backend = TorchBackend.__new__(TorchBackend)

    def boom(plan):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(backend, "_step", boom, raising=False)
    plan = StepPlan(0)
    with pytest.raises(FatalBackendError):
        backend.step(plan)
