"""The CUDA stream a TensorRT-LLM logits processor must work on.

TensorRT-LLM calls a per-request processor as processor(req_id, logits, token_ids,
stream_ptr, client_id). Its PyTorch runtime passes stream_ptr None (the current stream is
the one its forward step runs on); its TensorRT runtime calls from the C++ executor with
the stream the logits live on, and work queued on any other stream would race it.
"""

from __future__ import annotations

import contextlib
from typing import Any


def on_stream(stream_ptr: int | None) -> Any:
    """A context manager that queues torch work on TensorRT-LLM's stream (a no-op for None)."""
    if stream_ptr is None:
        return contextlib.nullcontext()
    import torch

    return torch.cuda.stream(torch.cuda.ExternalStream(stream_ptr))
