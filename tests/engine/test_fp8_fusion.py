"""The W8A8 GEMMs' inputs quantised by the kernels that produce them (engine/graph/fused.py
`*_fp8`, engine/graph/attention.py fp8=True): through Triton's interpreter (in a subprocess,
as tests/engine/test_graph_kernels.py) the same E4M3 bytes and scales as the one-kernel
quantisation of their own output, and that output unchanged; on the CPU, a decode step that
hands the projections their input quantised computes what one that lets them quantise it
does."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from orpheus_svc.engine.graph.attention import decode_attention_reference
from orpheus_svc.engine.graph.fused import TorchOps
from orpheus_svc.engine.graph.step import decode_hidden
from orpheus_svc.engine.model.linear import Fp8Linear, quantize_rows

from .test_graph_backend import _model

ROOT = Path(__file__).resolve().parents[2]

_PARITY = textwrap.dedent("""
    import torch
    from orpheus_svc.engine.graph.attention import DecodeAttention
    from orpheus_svc.engine.graph.fused import TritonOps
    from orpheus_svc.engine.model.fp8_kernels import quantize_rows_triton
    torch.manual_seed(0)

    def same(a, b):
        return bool(torch.equal(a, b))

    def quant_same(out, q):
        qr, sr = quantize_rows_triton(out.reshape(out.shape[0], -1))
        return {"bytes": bool(torch.equal(q[0].view(torch.uint8), qr.view(torch.uint8))),
                "scales": same(q[1], sr), "dtype": str(q[0].dtype),
                "nonzero": int((qr.view(torch.uint8) & 0x7F != 0).sum())}

    res = {}
    for dtype in (torch.float16, torch.bfloat16):
        # rows of very different size, so some quantised values are E4M3 subnormals
        mags = torch.logspace(-3, 2, 5)[:, None]
        x, delta = (torch.randn(5, 300) * mags).to(dtype), torch.randn(5, 300).to(dtype)
        w = (torch.randn(300) * 2).to(dtype)
        r = {}
        h, q = TritonOps.rms_norm_fp8(x, w, 1e-5)
        r["rms_norm"] = {"out": same(h, TritonOps.rms_norm(x, w, 1e-5)), **quant_same(h, q)}
        x1, x2 = x.clone(), x.clone()
        res1, h1 = TritonOps.add_rms_norm(x1, delta, w, 1e-5)
        res2, h2, q = TritonOps.add_rms_norm_fp8(x2, delta, w, 1e-5)
        r["add_rms_norm"] = {"out": same(h1, h2) and same(res1, res2) and same(x1, x2),
                             **quant_same(h2, q)}
        for n in (300, 1500):  # one column program unquantised, and two
            gu = (torch.randn(5, 2 * n) * mags * 3).to(dtype)
            y, q = TritonOps.silu_mul_fp8(gu)
            r[f"silu_mul {n}"] = {"out": same(y, TritonOps.silu_mul(gu)), **quant_same(y, q)}
        # attention: 6 heads over 2 kv heads, 4 splits, rows of 1, 40 and 150 keys
        kc = torch.randn(4, 2, 160, 16).to(dtype)
        vc = (torch.randn(4, 2, 160, 16) * torch.logspace(-2, 1, 16)).to(dtype)
        qa = torch.randn(3, 6, 16).to(dtype)
        slots, lens = torch.tensor([3, 0, 1]), torch.tensor([1, 40, 150])
        att = DecodeAttention(3, 6, 2, 16, 4, torch.device("cpu"), dtype)
        plain = att(qa, kc, vc, slots, lens).clone()
        out, q = att(qa, kc, vc, slots, lens, fp8=True)
        r["attention"] = {"out": same(out, plain), **quant_same(out, q),
                          "shape": tuple(q[0].shape) + tuple(q[1].shape)}
        res[str(dtype)] = r
    # the card's start-up checks, on a tiny model's shapes in float16
    from types import SimpleNamespace
    from orpheus_svc.engine.graph.attention import triton_kernel_works
    from orpheus_svc.engine.graph.fused import triton_ops_work
    from tests.engine.test_graph_backend import _model
    m = _model(True)
    tiny = SimpleNamespace(spec=m.spec, device=torch.device("cpu"), dtype=torch.float16,
                           cos=m.cos.half(), sin=m.sin.half())
    res["start_up"] = [triton_ops_work(tiny), triton_kernel_works(tiny)]
    print(res)
""")


def _interpret(script: str):
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_the_fused_quantising_kernels_give_the_one_kernel_quantisations_bits():
    got = _interpret(_PARITY)
    assert got.pop("start_up") == [True, True]  # the card's checks pass on these kernels
    for dtype, ops in got.items():
        for name, r in ops.items():
            assert r["out"], (dtype, name, r)  # the plain output is unchanged
            assert r["bytes"] and r["scales"], (dtype, name, r)
            assert r["dtype"] == "torch.float8_e4m3fn" and r["nonzero"] > 0, (dtype, name, r)
        assert ops["attention"]["shape"] == (3, 96, 3, 1), ops["attention"]


def test_an_fp8_projection_multiplies_the_quantised_input_it_is_handed():
    torch.manual_seed(0)
    lin = Fp8Linear(torch.randn(48, 32), torch.float32)
    x = torch.randn(5, 32)
    lin.paths[5] = "w8a8"
    assert lin.takes_quantized(5) and lin.gpu_kernels(5, quantized=True) == 1
    assert lin.gpu_kernels(5) == 2
    assert torch.equal(lin(x, lin.quantize(x)), lin(x))
    # the operands handed over, not x, are what it multiplies
    assert torch.allclose(lin(x, quantize_rows(2 * x)), 2 * lin(x), rtol=1e-6, atol=1e-6)
    lin.paths[5] = "weight_only"
    assert not lin.takes_quantized(5) and lin.gpu_kernels(5, quantized=True) == 1


def _hidden(model, monkeypatch, hand_over: bool):
    ids = torch.tensor([128266, 130000, 140000])
    slots, pos = torch.tensor([0, 2, 4]), torch.tensor([3, 9, 20])
    for t in model.k_cache + model.v_cache:
        t.zero_()
    with monkeypatch.context() as m:
        if not hand_over:
            m.setattr(Fp8Linear, "takes_quantized", lambda self, rows: False)
        return decode_hidden(model, ids, slots, pos, decode_attention_reference, TorchOps)


def test_a_w8a8_step_with_its_inputs_handed_over_computes_what_the_projections_would(
        monkeypatch):
    model = _model(True, "fp8")
    for layer in model.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            layer[name].paths[3] = "w8a8"
    calls = []
    real = Fp8Linear.run
    monkeypatch.setattr(Fp8Linear, "run",
                        lambda self, x, path, q=None: calls.append(q is not None)
                        or real(self, x, path, q))
    handed = _hidden(model, monkeypatch, True)
    assert calls and all(calls), calls  # every projection got its input quantised
    calls.clear()
    own = _hidden(model, monkeypatch, False)
    assert calls and not any(calls), calls
    assert torch.equal(handed, own)
