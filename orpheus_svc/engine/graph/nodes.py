"""How many kernels one graph-engine step launches: the nodes its CUDA graph holds.

At decode batch sizes a step's cost is largely per kernel (a few microseconds each), so the
node count is a figure to watch, and one a CPU can count: run the step under a
TorchDispatchMode that counts every aten operation that launches work (views and metadata
ops launch none), and count each fused operation (engine/graph/fused.py) and each attention
call as the kernels it is on the GPU, whatever runs in its place here.

    count_step_nodes(runner, bucket, fused=True)
        -> {"total": n, "per_layer": n_layer, "other": n - layers * n_layer, ...}

`fused=True` counts the step as the GPU runs it with TritonOps and TritonChoice (each fused
operation one kernel, the split-K attention two, the token choice after the audio GEMM
one); `fused=False` counts it with TorchOps and TorchChoice, the unfused eager arithmetic.
Either way an FP8 projection (engine/model/linear.py) counts as the kernels its path at
the bucket's row count launches on CUDA (`Fp8Linear.gpu_kernels`: one for the weight-only
GEMM, the quantisation and _scaled_mm for W8A8, _scaled_mm alone where its input comes
quantised by the kernel that produced it: a `*_fp8` fused operation, or the attention with
fp8=True, each as many kernels as its plain form).
tests/engine/test_graph_nodes.py holds the counts of today's step, so a change that adds
kernels to it fails there; scripts/gpu-engine-check.sh records them.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from orpheus_svc.engine.graph.fused import TorchOps
from orpheus_svc.engine.model.linear import Fp8Linear

# aten operations that only make a view or read metadata: no kernel on the GPU
_NO_KERNEL = {
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice",
    "select", "unsqueeze", "squeeze", "as_strided", "alias", "detach", "unbind", "split",
    "split_with_sizes", "chunk", "narrow", "lift_fresh", "empty", "empty_like",
    "empty_strided", "_reshape_alias", "view_as", "expand_as", "unflatten", "flatten",
    "sym_size", "sym_stride", "dim", "is_same_size", "numpy_T", "T", "mT",
}
FUSED_KERNELS = {"rms_norm": 1, "add_rms_norm": 1, "rope_qkv": 1, "silu_mul": 1,
                 "rms_norm_fp8": 1, "add_rms_norm_fp8": 1, "silu_mul_fp8": 1}
CHOICE_KERNELS = 1  # the token choice after the audio GEMM (engine/graph/choose.py)
ATTENTION_KERNELS = 2  # split-K: the split pass and the reduction (engine/graph/attention.py)


class _Counting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not self.paused and name not in _NO_KERNEL:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


class _Kernel:
    """Runs `inner` uncounted and counts it as `kernels` nodes (a number, or a function of
    the call's arguments)."""

    def __init__(self, mode: _Counting, inner, kernels, name: str) -> None:
        self.mode, self.inner, self.kernels, self.name = mode, inner, kernels, name

    def __call__(self, *args, **kwargs):
        self.mode.paused += 1
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.mode.paused -= 1
            n = self.kernels(*args, **kwargs) if callable(self.kernels) else self.kernels
            self.mode.ops[self.name] += n


def _fp8_kernels(lin: Fp8Linear, bucket: int):
    """An FP8 projection's kernels at `bucket` rows: fewer where its input comes quantised."""
    return lambda x, q=None: lin.gpu_kernels(bucket, quantized=q is not None)


def count_step_nodes(runner, bucket: int, fused: bool = True) -> dict:
    """The kernels one step of `bucket` rows launches (module docstring), counted by running
    it on the runner's static buffers (as they hold: padding rows on the dummy slot), and
    again with one layer less for the per-layer share."""
    ops = _count(runner, bucket, fused)
    total = sum(ops.values())
    model = runner.model
    layers = model.layers
    per_layer = 0
    if len(layers) > 1:
        try:
            model.layers = layers[:-1]
            per_layer = total - sum(_count(runner, bucket, fused).values())
        finally:
            model.layers = layers
    return {"total": total, "per_layer": per_layer, "other": total - len(layers) * per_layer,
            "layers": len(layers), "ops": dict(sorted(ops.items()))}


def _count(runner, bucket: int, fused: bool) -> Counter:
    from orpheus_svc.engine.graph.choose import TorchChoice
    from orpheus_svc.engine.graph.step import decode_step

    mode = _Counting()
    ops, attend, choice = TorchOps, runner._attend[bucket, False], TorchChoice
    if fused:
        ops = type("CountedFusedOps", (), {
            name: staticmethod(_Kernel(mode, getattr(TorchOps, name), n, f"fused.{name}"))
            for name, n in FUSED_KERNELS.items()})
        attend = _Kernel(mode, attend, ATTENTION_KERNELS, "attention")
        choice = type("CountedChoice", (), {
            "choose": staticmethod(_Kernel(mode, TorchChoice.choose, CHOICE_KERNELS,
                                           "fused.choose"))})
    layers = runner.model.layers
    saved = [dict(layer) for layer in layers]
    try:
        for layer in layers:
            for name, lin in list(layer.items()):
                if isinstance(lin, Fp8Linear):
                    layer[name] = _Kernel(mode, lin, _fp8_kernels(lin, bucket),
                                          f"fp8.{lin.path(bucket)}")
                    layer[name].takes_quantized = lin.takes_quantized
        with torch.inference_mode(), mode:
            decode_step(runner.model, runner.state, *runner.inputs(bucket), attend,
                        runner.out[:bucket], ops, choice=choice)
    finally:
        for layer, before in zip(layers, saved):
            layer.update(before)
    return mode.ops
