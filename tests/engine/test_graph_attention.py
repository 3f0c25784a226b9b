"""The graph engine's Triton decode attention (engine/graph/attention.py) on the CPU, through
Triton's interpreter (TRITON_INTERPRET=1, in a subprocess: the variable must be set before
the kernels are compiled), against its torch reference: rows of different lengths in
different slots, 1 to 8 key splits, grouped-query heads, float32 and float16."""

import os
import subprocess
import sys
import textwrap

import torch

from orpheus_svc.engine.graph.attention import decode_attention_reference, splits_for

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


def test_the_triton_kernel_matches_its_reference_in_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    worst = eval(out.stdout.strip().splitlines()[-1])  # {dtype: max relative error}
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
