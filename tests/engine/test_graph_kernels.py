"""The graph engine's Triton kernels on the CPU, through Triton's interpreter
(TRITON_INTERPRET=1, in a subprocess: the variable must be set before the kernels are
compiled), against their torch references: the decode attention (engine/graph/attention.py:
rows of different lengths in different slots, 1 to 8 key splits, grouped-query heads) and
the fused small operations (engine/graph/fused.py), alone and as a whole decode step, in
float32 and float16."""

import os
import subprocess
import sys
import textwrap

from pathlib import Path

import torch

from orpheus_svc.engine.graph.attention import decode_attention_reference, splits_for

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import torch
    from orpheus_svc.engine.graph.attention import DecodeAttention, decode_attention_reference
    torch.manual_seed(0)
    worst = {}
    for dtype in (torch.float32, torch.float16):
        for heads, kv, d, span, splits in ((4, 2, 16, 200, 1), (4, 2, 16, 200, 4),
                                           (6, 2, 32, 150, 8), (24, 8, 128, 130, 2)):
            kc = torch.randn(6, kv, span, d).to(dtype)
            vc = torch.randn(6, kv, span, d).to(dtype)
            q = torch.randn(4, heads, d).to(dtype)
            slots = torch.tensor([5, 0, 3, 1])
            lens = torch.tensor([1, 64, 65, span])  # one key, a block, a block + 1, all
            att = DecodeAttention(4, heads, kv, d, splits, torch.device("cpu"), dtype)
            att.mid_o.fill_(float("nan"))  # every partial a row reads must be written
            got = att(q, kc, vc, slots, lens).float()
            ref = decode_attention_reference(q.float(), kc.float(), vc.float(), slots, lens)
            err = float((got - ref).norm() / ref.norm())
            worst[str(dtype)] = max(worst.get(str(dtype), 0.0), err)
    print(worst)
""")


def _interpret(script: str) -> dict:
    """Run `script` under Triton's interpreter; its last printed line, a dict literal."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_the_triton_kernel_matches_its_reference_in_the_interpreter():
    worst = _interpret(_SCRIPT)  # {dtype: max relative error}
    assert worst["torch.float32"] < 1e-5
    assert worst["torch.float16"] < 2e-3


def test_the_reference_attends_each_row_to_its_own_slot_up_to_its_length():
    torch.manual_seed(1)
    kc, vc = torch.randn(3, 1, 10, 4), torch.randn(3, 1, 10, 4)
    q = torch.randn(2, 2, 4)
    out = decode_attention_reference(q, kc, vc, torch.tensor([2, 0]), torch.tensor([3, 10]))
    for row, (slot, n) in enumerate(((2, 3), (0, 10))):
        w = torch.softmax(q[row] @ kc[slot, 0, :n].T / 2.0, dim=-1)  # 1/sqrt(4)
        torch.testing.assert_close(out[row], w @ vc[slot, 0, :n])
    kc[2, 0, 3:] = 1e4  # keys past a row's length never count
    torch.testing.assert_close(
        decode_attention_reference(q, kc, vc, torch.tensor([2, 0]), torch.tensor([3, 10])), out)


def test_splits_fill_the_machine_at_small_batches_and_stop_at_one():
    assert splits_for(1, 8, 132) == 16
    assert splits_for(64, 8, 132) == 1
    assert all(splits_for(b, 8, 132) >= splits_for(b + 1, 8, 132) for b in range(1, 300))


_FUSED = textwrap.dedent("""
    import torch
    from orpheus_svc.engine.graph.fused import TorchOps, TritonOps
    torch.manual_seed(0)
    worst = {}

    def rel(a, b):
        return float((a.float() - b.float()).norm() / b.float().norm())
    for dtype in (torch.float32, torch.float16):
        h, heads, kvh, d, inter, seq = 96, 6, 2, 32, 80, 40
        x, delta, w = (torch.randn(3, h).to(dtype), torch.randn(3, h).to(dtype),
                       torch.randn(h).to(dtype))
        qkv = torch.randn(3, (heads + 2 * kvh) * d).to(dtype)
        cos, sin = torch.randn(seq, d).to(dtype), torch.randn(seq, d).to(dtype)
        pos, slots = torch.tensor([0, 7, seq - 1]), torch.tensor([2, 0, 3])
        kc = torch.randn(4, kvh, seq, d).to(dtype)
        vc = torch.randn(4, kvh, seq, d).to(dtype)
        kc2, vc2 = kc.clone(), vc.clone()
        gu = torch.randn(3, 2 * inter).to(dtype)
        xt = x.clone()
        res_t, norm_t = TritonOps.add_rms_norm(xt, delta, w, 1e-5)
        res_r, norm_r = TorchOps.add_rms_norm(x, delta, w, 1e-5)
        errs = [rel(TritonOps.rms_norm(x, w, 1e-5), TorchOps.rms_norm(x, w, 1e-5)),
                rel(norm_t, norm_r), rel(res_t, res_r), rel(xt, res_r),
                rel(TritonOps.rope_qkv(qkv, cos, sin, pos, slots, kc, vc, heads, kvh),
                    TorchOps.rope_qkv(qkv, cos, sin, pos, slots, kc2, vc2, heads, kvh)),
                rel(kc, kc2), rel(vc, vc2),
                rel(TritonOps.silu_mul(gu), TorchOps.silu_mul(gu))]
        worst[str(dtype)] = max(errs)
    print(worst)
""")

_FUSED_STEP = textwrap.dedent("""
    import torch
    from tests.engine.test_graph_backend import _drive, _model, _request
    from orpheus_svc.engine.graph.backend import GraphBackend
    from orpheus_svc.engine.graph.fused import TorchOps, TritonOps
    from orpheus_svc.engine.graph.step import decode_hidden
    from orpheus_svc.engine.graph.attention import decode_attention_reference
    model = _model(True)
    for t in model.k_cache + model.v_cache:  # the fused path in float32 (no float64 in Triton)
        t.data = t.data.float()
    model.cos, model.sin = model.cos.float(), model.sin.float()
    model.embed = model.embed.float()
    model.final_norm = model.final_norm.float()
    for layer in model.layers:
        for k in ("in_norm", "post_norm"):
            layer[k] = layer[k].float()
        for k in ("qkv", "o", "gate_up", "down"):
            layer[k].weight = layer[k].weight.float()
    ids = torch.tensor([128266, 130000, 140000])
    slots, pos = torch.tensor([0, 2, 4]), torch.tensor([3, 9, 20])
    caches = [t.clone() for t in model.k_cache + model.v_cache]
    ref = decode_hidden(model, ids, slots, pos, decode_attention_reference, TorchOps)
    for t, c in zip(model.k_cache + model.v_cache, caches):
        t.copy_(c)
    got = decode_hidden(model, ids, slots, pos, decode_attention_reference, TritonOps)
    print({"hidden": float((got - ref).norm() / ref.norm())})
""")


def test_the_fused_kernels_match_torch_in_the_interpreter():
    worst = _interpret(_FUSED)  # {dtype: max relative error over every op and output}
    assert worst["torch.float32"] < 1e-5
    assert worst["torch.float16"] < 2e-3


def test_a_decode_step_with_the_fused_kernels_matches_torch_in_the_interpreter():
    assert _interpret(_FUSED_STEP)["hidden"] < 1e-4
