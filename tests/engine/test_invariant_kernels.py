"""The GPU half of batch invariance, on the CPU through Triton's interpreter (TRITON_INTERPRET=1,
in a subprocess: the variable must be set before the kernels compile): fixed_gemm
(engine/model/fixed_gemm.py), the matmul of a seeded step on CUDA, against its reference
and with one row's bits the same at every M and every place; the decode attention's
INVARIANT_SPLITS (engine/graph/attention.py) giving a row the same bits in every bucket,
where the splits a bucket would choose give other bits."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The interpreter's tl.dot is one numpy matmul of the blocks, and numpy's BLAS may give a
# row other bits by its place in the block (OpenBLAS's AVX-512 sgemm kernels do: a row
# moves in 60 of 96 places of a [32, 64] x [64, 64] call). A GPU's dot computes each row in
# lanes of its own, the same instructions wherever the row sits; so the scripts run the dot
# a row at a time, each row a [1, K] call on a copy of its own, and what they check is the
# kernels' own schedule (tiles, the walk over K, the splits), on every CPU.
_ROWWISE_DOT = textwrap.dedent("""
    import numpy as np
    from triton.runtime import interpreter as _interp
    _dot = _interp.InterpreterBuilder.create_dot

    def _rowwise_dot(self, a, b, d, *args):
        rows = [_dot(self, _interp.TensorHandle(a.data[..., r:r + 1, :].copy(), a.dtype), b,
                     _interp.TensorHandle(d.data[..., r:r + 1, :].copy(), d.dtype), *args).data
                for r in range(a.data.shape[-2])]
        return _interp.TensorHandle(np.concatenate(rows, axis=-2), d.dtype.scalar)
    _interp.InterpreterBuilder.create_dot = _rowwise_dot
""")

_GEMM = _ROWWISE_DOT + textwrap.dedent("""
    import random
    import torch
    from orpheus_svc.engine.model.fixed_gemm import fixed_gemm
    from orpheus_svc.engine.model.linear import quantize_rows
    torch.manual_seed(0)
    rng = random.Random(0)
    out = {}
    k, n = 96, 80  # two K steps and two column tiles, each with a ragged edge
    w = torch.randn(n, k)
    for name, dtype in (("float32", torch.float32), ("float16", torch.float16),
                        ("fp8", torch.float8_e4m3fn)):
        if name == "fp8":
            qw, sw = quantize_rows(w)
            operand = lambda x: quantize_rows(x)
            w_t, ref_w = qw.T, qw.float() * sw
        else:
            w_t, ref_w = w.to(dtype).T, w.to(dtype).float()

        def gemm(x):
            if name == "fp8":
                qx, sx = quantize_rows(x)
                return fixed_gemm(qx, w_t, sx, sw.view(1, -1), torch.float32)
            return fixed_gemm(x.to(dtype), w_t)

        def ref(x):
            if name == "fp8":
                qx, sx = quantize_rows(x)
                return (qx.float() * sx).double() @ ref_w.double().T
            return x.to(dtype).double() @ ref_w.double().T
        x = torch.randn(37, k)
        got = gemm(x).double()
        want = ref(x)
        err = float((got - want).norm() / want.norm())
        row = torch.randn(1, k)
        alone = gemm(row)[0]
        moved = 0
        places = 0
        # every place up to two tiles for float32; the tiles' edges and ends elsewhere
        sizes = (*range(1, 41), 64, 65) if name == "float32" else (1, 2, 3, 31, 32, 33, 64, 100)
        for m in sizes:
            for at in (range(m) if m <= 12 and name == "float32"
                       else sorted({0, 1, 31, 32, 33, m // 2, m - 1} & set(range(m)))):
                x = torch.randn(m, k)
                x[at] = row[0]
                places += 1
                moved += not torch.equal(gemm(x)[at], alone)
        out[name] = {"err": err, "places": places, "moved": moved}
    print(out)
""")

_ATTENTION = _ROWWISE_DOT + textwrap.dedent("""
    import random
    import torch
    from orpheus_svc.engine.graph.attention import (INVARIANT_SPLITS, DecodeAttention,
                                                    splits_for)
    torch.manual_seed(0)
    rng = random.Random(1)
    heads, kv, d, span, slots = 4, 2, 16, 400, 40
    kc = torch.randn(slots, kv, span, d)
    vc = torch.randn(slots, kv, span, d)
    q0 = torch.randn(heads, d)
    target_slot, target_len = 7, 350  # 4 splits cut it at 128 keys, 8 and 16 at 64

    def run(bucket, splits, at):
        q = torch.randn(bucket, heads, d)
        q[at] = q0
        others = [s for s in range(slots) if s != target_slot]
        rows = rng.sample(others, bucket - 1)
        rows.insert(at, target_slot)
        lens = torch.tensor([target_len if s == target_slot else rng.randrange(1, 150)
                             for s in rows])
        att = DecodeAttention(bucket, heads, kv, d, splits, torch.device("cpu"), torch.float32)
        return att(q, kc, vc, torch.tensor(rows), lens)[at].clone()

    want = run(1, INVARIANT_SPLITS, 0)
    moved = sum(not torch.equal(run(b, INVARIANT_SPLITS, rng.randrange(b)), want)
                for b in (1, 2, 5, 9, 17))
    # what the buckets' own splits (splits_for, 132 multiprocessors) would give instead
    chosen = {splits_for(b, kv, 132) for b in (1, 8, 64)}
    by_bucket = len({run(1, s, 0).numpy().tobytes() for s in chosen})
    print({"moved": moved, "splits": sorted(chosen), "distinct_by_bucket": by_bucket})
""")


def _interpret(script: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_the_fixed_gemm_matches_its_reference_and_keeps_a_row_at_every_m():
    got = _interpret(_GEMM)
    assert got["float32"]["err"] < 1e-6
    assert got["float16"]["err"] < 1e-3
    assert got["fp8"]["err"] < 1e-6  # the same E4M3 operands and scales, summed in float32
    for name, r in got.items():
        assert r["places"] > (200 if name == "float32" else 30) and r["moved"] == 0, (name, r)


def test_the_invariant_attention_split_keeps_a_row_in_every_bucket():
    got = _interpret(_ATTENTION)
    assert got["moved"] == 0
    # the splits each bucket would choose for itself differ, and give the row other bits
    assert len(got["splits"]) > 1 and got["distinct_by_bucket"] == len(got["splits"])


def test_the_seeded_steps_attention_splits_alike_in_every_bucket():
    """The graph runner's seeded step (invariant) attends with INVARIANT_SPLITS in every
    bucket; its unseeded steps keep the split each bucket chooses (splits_for)."""
    from orpheus_svc.engine.graph.attention import INVARIANT_SPLITS, splits_for
    from orpheus_svc.engine.graph.runner import GraphRunner

    from .test_graph_backend import _model

    runner = GraphRunner(_model(True), 64, graphs=False, kernel="triton")
    kv = runner.model.spec.num_key_value_heads
    assert {runner._attend[b, True].splits for b in runner.buckets} == {INVARIANT_SPLITS}
    assert [runner._attend[b, False].splits for b in runner.buckets] == [
        splits_for(b, kv, 8) for b in runner.buckets]
    assert len({splits_for(b, kv, 8) for b in runner.buckets}) > 1
