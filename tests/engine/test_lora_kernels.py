"""The gathered LoRA matmuls: the Triton kernels (engine/graph/lora_kernels.py) through
Triton's interpreter against the plain torch gather path, and that gather path (what the
graph engine runs on CUDA without Triton) against the grouped path every CPU step takes.

Rows on different adapters, the base model (the pool's zero entry) between them, a rank
below the pool's, three fused modules of different widths (q, k, v) so column blocks
straddle module boundaries, float32 and float16."""

import numpy as np
import torch

from orpheus_svc.engine.model.lora import LoraPool, LoraRows
from orpheus_svc.engine.model.invariant import invariant_step

from .test_graph_kernels import _interpret
from .tiny import tiny_spec

_SCRIPT = """
import torch
from orpheus_svc.engine.graph.lora_kernels import triton_expand, triton_shrink
from orpheus_svc.engine.model.lora import gather_expand, gather_shrink
torch.manual_seed(0)
worst = {}
for dtype in (torch.float32, torch.float16):
    for inp, outs, rank in ((96, [80, 48, 48], 16), (72, [200], 8), (40, [56, 56], 4)):
        n, s_r = 3, len(outs) * rank
        a = torch.randn(n + 1, s_r, inp).to(dtype)
        b = torch.randn(n + 1, sum(outs), rank).to(dtype)
        a[n] = 0
        b[n] = 0
        idx = torch.tensor([0, n, 2, 1, 0, n, 2])  # n: the base model's entry
        x = torch.randn(len(idx), inp).to(dtype)
        y = torch.randn(len(idx), sum(outs)).to(dtype)
        offs = [sum(outs[:j]) for j in range(len(outs))]
        slices = list(zip(offs, outs))
        s = triton_shrink(x, idx, a)
        got = y.clone()
        triton_expand(got, s, idx, b, slices, rank)
        ref_s = gather_shrink(x.float(), idx, a.float())
        ref = y.float().clone()
        gather_expand(ref, ref_s, idx, b.float(), slices, rank)
        base_rows = (idx == n)
        assert torch.equal(got[base_rows], y[base_rows]), "a base row was written"
        err = float((got.float() - ref).norm() / ref.norm())
        serr = float((s - ref_s).norm() / ref_s.norm())
        worst[str(dtype)] = max(worst.get(str(dtype), 0.0), err, serr)
print(worst)
"""


def test_the_lora_kernels_match_the_gather_path_in_the_interpreter():
    worst = _interpret(_SCRIPT)  # {dtype: max relative error}
    assert worst["torch.float32"] < 1e-5
    assert worst["torch.float16"] < 3e-3


def _pool():
    """Slot 0: rank 8 on q and down; slot 1: rank 4 on k, v and up; slot 2 empty."""
    spec = tiny_spec()
    pool = LoraPool(spec, 3, 8, "cpu", torch.float64)
    gen = torch.Generator().manual_seed(3)
    for index, (rank, modules) in enumerate(((8, ("self_attn.q_proj", "mlp.down_proj")),
                                             (4, ("self_attn.k_proj", "self_attn.v_proj",
                                                  "mlp.up_proj")))):
        shapes = spec.tensor_shapes()
        layers = {}
        for li in range(spec.num_hidden_layers):
            layers[li] = {}
            for m in modules:
                out, inp = shapes[f"model.layers.{li}.{m}.weight"]
                layers[li][m] = (torch.randn(rank, inp, generator=gen),
                                 torch.randn(out, rank, generator=gen))
        pool.install(index, layers, 0.5)
    return pool


def test_the_gather_path_equals_the_grouped_path():
    pool = _pool()
    adapters = np.array([1, -1, 0, 1, -1, 0, 0])
    gen = torch.Generator().manual_seed(4)
    for name, (inp, out) in (("qkv", (64, 128)), ("gate_up", (64, 256)), ("down", (128, 64))):
        x = torch.randn(len(adapters), inp, generator=gen, dtype=torch.float64)
        y = torch.randn(len(adapters), out, generator=gen, dtype=torch.float64)
        grouped, indexed = y.clone(), y.clone()
        LoraRows.grouped(pool, adapters).add(1, name, x, grouped)
        LoraRows.indexed(pool, torch.as_tensor(adapters)).add(1, name, x, indexed)
        torch.testing.assert_close(indexed, grouped, rtol=1e-12, atol=1e-12)
        assert torch.equal(grouped[adapters < 0], y[adapters < 0])  # base rows untouched
        changed = (grouped != y).any(-1)
        if name in pool.adapted[0] or name in pool.adapted[1]:
            assert changed[adapters >= 0].any()


def test_a_seeded_rows_update_has_the_same_bits_whatever_its_batch():
    """Inside an invariant step the grouped path is rows_matmul: a row's bits do not
    depend on how many rows share its adapter or the step (engine/model/invariant.py)."""
    pool = _pool()
    pool.a = [{k: v.float() for k, v in layer.items()} for layer in pool.a]
    pool.b = [{k: v.float() for k, v in layer.items()} for layer in pool.b]
    gen = torch.Generator().manual_seed(5)
    row = torch.randn(1, 64, generator=gen)
    with invariant_step():
        alone = torch.zeros(1, 128)
        LoraRows.grouped(pool, [0]).add(0, "qkv", row, alone)
        for m in (2, 3, 5, 8, 13):
            x = torch.randn(m, 64, generator=gen)
            at = m // 2
            x[at] = row[0]
            adapters = np.array([0, 1, -1] * m)[:m]
            adapters[at] = 0
            y = torch.zeros(m, 128)
            LoraRows.grouped(pool, adapters).add(0, "qkv", x, y)
            assert torch.equal(y[at], alone[0]), m
