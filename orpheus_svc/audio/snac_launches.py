"""How many kernels one SNAC call launches, counted on any device (a CPU included).

Runs a call under a TorchDispatchMode that counts every aten operation that launches work
(views and metadata ops launch none: engine/graph/nodes.py's list), and counts each Snake
as the kernels it is on the GPU: 1 with the fused Triton Snake (audio/snac_kernels.py),
whatever runs in its place here, else the torch Snake's own 5 (mul, sin, square, mul, add).

    count_call_launches(codec, frames, keep, fused=True)
        -> {"latents": n, "decode": n, "total": n, "snake_layers": 29, "snake": n}

On CUDA with graphs the decode part is one graph launch replaying "decode" kernels; the
host-side work per call is then the latents, the copies in and out, and one launch.
bench/ records the counts; tests/audio/test_snac_launches.py holds them.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

FUSED_SNAKE_KERNELS = 1
# aten operations that only make a view or read metadata: no kernel on the GPU (the list of
# engine/graph/nodes.py, which audio/ may not import: it sits above audio/ in the layers)
NO_KERNEL_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice",
    "select", "unsqueeze", "squeeze", "as_strided", "alias", "detach", "unbind", "split",
    "split_with_sizes", "chunk", "narrow", "lift_fresh", "empty", "empty_like",
    "empty_strided", "_reshape_alias", "view_as", "expand_as", "unflatten", "flatten",
    "sym_size", "sym_stride", "dim", "is_same_size", "numpy_T", "T", "mT",
})


class _Counting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self.paused and name not in NO_KERNEL_OPS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def count_call_launches(codec, frames: Sequence[np.ndarray], keep: tuple[int, int] | None,
                        fused: bool = True) -> dict:
    """The kernels of one codec call on `frames` (windows of one length) keeping `keep`
    (module docstring); the codec decodes eagerly while counting (its graphs, if any, are
    set aside) and is left as it was."""
    from orpheus_svc.audio.codec import _Snake

    snakes = [m for m in codec.decoder.modules() if isinstance(m, _Snake)]
    mode = _Counting()
    graphs, fused_before = codec.graphs, [m.fused for m in snakes]
    originals = [m.forward for m in snakes]

    def counted(inner):
        def forward(x):
            mode.paused += 1
            try:
                return inner(x)
            finally:
                mode.paused -= 1
                mode.ops["snake"] += FUSED_SNAKE_KERNELS
        return forward

    codec.graphs = None
    try:
        for m, inner in zip(snakes, originals):
            if fused:  # the GPU's one kernel, counted as such; here the torch arithmetic runs
                m.fused = False
                m.forward = counted(inner)
        with mode:
            z = codec.latents(frames)
            latents = sum(mode.ops.values())
            codec.decode_latents(z, keep=keep)
    finally:
        codec.graphs = graphs
        for m, was in zip(snakes, fused_before):
            m.fused = was
            m.__dict__.pop("forward", None)
    total = sum(mode.ops.values())
    snake = mode.ops["snake"] if fused else 0
    return {"latents": latents, "decode": total - latents, "total": total,
            "snake_layers": len(snakes), "snake": snake, "ops": dict(mode.ops)}
