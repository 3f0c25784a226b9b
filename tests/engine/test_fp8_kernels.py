"""The FP8 layers' Triton kernels (engine/model/fp8_kernels.py) on the CPU through Triton's
interpreter (TRITON_INTERPRET=1, in a subprocess: the variable must be set before the
kernels compile), against the CPU path of Fp8Linear on the same E4M3 operands; and the
choice of each projection's path per bucket (engine/graph/fp8_paths.py)."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from orpheus_svc.engine.graph.fp8_paths import RULE_MAX_M, choose_fp8_paths
from orpheus_svc.engine.model.fp8_kernels import WEIGHT_ONLY_MAX_M, split_for
from orpheus_svc.engine.model.invariant import invariant_step
from orpheus_svc.engine.model.linear import Fp8Linear

ROOT = Path(__file__).resolve().parents[2]

_QUANT = textwrap.dedent("""
    import torch
    from orpheus_svc.engine.model.fp8_kernels import quantize_rows_triton
    from orpheus_svc.engine.model.linear import quantize_rows
    torch.manual_seed(0)
    k = 300  # not a power of two: a masked tail
    mags = torch.logspace(-9, 3, k)[torch.randperm(k)]
    x = torch.randn(6, k) * mags
    # a row of every E4M3 value and every midpoint between neighbours (ties, both sides of
    # 2^-6 where the subnormals start), scaled by one: its largest value is 448
    codes = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (codes[1:] + codes[:-1]) / 2
    ties = torch.cat([codes, mids, -mids])[:k]
    x = torch.cat([x, ties[None], torch.zeros(1, k)])
    out = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        xs = x.to(dtype)
        q, s = quantize_rows_triton(xs)
        qr, sr = quantize_rows(xs)
        out[name] = {"bits_differ": int((q.view(torch.uint8) != qr.view(torch.uint8)).sum()),
                     "scales_equal": bool(torch.equal(s, sr)), "dtype": str(q.dtype),
                     "shape": tuple(s.shape)}
    tie_scale = float(quantize_rows(x[6:7])[1])
    out["tie_scale_is_one"] = tie_scale == 1.0
    print(out)
""")

_GEMM = textwrap.dedent("""
    import torch
    from orpheus_svc.engine.model.fp8_kernels import (counter_slots, split_for,
                                                      weight_only_gemm)
    from orpheus_svc.engine.model.linear import Fp8Linear
    torch.manual_seed(0)
    out = []
    # (M, N, K, sms): split-K with a ragged last chunk; one split; two column tiles with a
    # ragged edge; two row tiles (BLOCK_M 64) split in K
    for m, n, k, sms in ((1, 80, 1100, 64), (3, 200, 300, 1), (17, 96, 256, 1),
                         (65, 64, 512, 8)):
        w = torch.randn(n, k) * torch.logspace(-2, 1, n)[:, None]
        lin = Fp8Linear(w, torch.float32)
        counters = torch.zeros(counter_slots(n), dtype=torch.int32)
        for dtype in (torch.float32, torch.float16):
            x = torch.randn(m, k).to(dtype)
            want = lin.run(x, "weight_only").double()  # the CPU path, same E4M3 operands
            got = weight_only_gemm(x, lin.qweight, lin.scale_row, torch.float32, counters,
                                   sms=sms)
            again = weight_only_gemm(x, lin.qweight, lin.scale_row, torch.float32, counters,
                                     sms=sms)
            err = float((got.double() - want).norm() / want.norm())
            out.append({"m": m, "dtype": str(dtype), "split": split_for(m, n, k, sms)[0],
                        "err": err, "same_twice": bool(torch.equal(got, again)),
                        "counters_zero": int(counters.abs().sum()) == 0})
    from orpheus_svc.engine.model.fp8_kernels import fp8_kernels_work
    from orpheus_svc.engine.model.linear import quantize_rows
    print({"rows": out, "start_up_check": fp8_kernels_work(torch.device("cpu"), torch.float16,
                                                                       quantize_rows)})
""")


def _interpret(script: str):
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_the_one_kernel_quantisation_gives_torchs_bits_and_scales():
    got = _interpret(_QUANT)
    assert got["tie_scale_is_one"]  # so the tie row really holds E4M3 midpoints
    for name in ("bfloat16", "float32"):
        assert got[name]["bits_differ"] == 0, got
        assert got[name]["scales_equal"] and got[name]["shape"] == (8, 1), got
        assert got[name]["dtype"] == "torch.float8_e4m3fn"


def test_the_weight_only_gemm_matches_fp8linears_cpu_path_split_or_not():
    got = _interpret(_GEMM)
    assert got["start_up_check"] is True  # the card's start-up check passes on these kernels
    got = got["rows"]
    assert {r["split"] for r in got} == {1, 2, 3}, got  # both kernel endings ran
    for r in got:
        # float32 x: the same products summed in another order; float16 x: the same (the
        # CPU path multiplies x as float32), within fp16's rounding of x
        assert r["err"] < (1e-6 if r["dtype"] == "torch.float32" else 2e-3), r
        assert r["same_twice"] and r["counters_zero"], r


def test_split_k_fills_the_card_at_batch_one_and_keeps_whole_chunks():
    # o and down of the 3B model at batch 1 on 132 multiprocessors: 48 column tiles
    assert split_for(1, 3072, 3072, 132) == (8, 384)
    assert split_for(1, 3072, 8192, 132) == (8, 1024)
    assert split_for(1, 16384, 3072, 132) == (2, 1536)  # gate_up: 256 tiles already
    split, chunk = split_for(1, 80, 1100, 64)
    assert (split, chunk) == (3, 384)  # cut in 4, then whole BLOCK_K steps: 3 chunks


def test_the_start_up_check_falls_back_on_a_failure_and_refuses_wrong_bits(monkeypatch,
                                                                            caplog):
    from orpheus_svc.engine.model import fp8_kernels
    from orpheus_svc.engine.model.linear import quantize_rows
    cpu = torch.device("cpu")

    def broken(x):
        raise RuntimeError("no kernel image")
    monkeypatch.setattr(fp8_kernels, "_WORKS", {})
    monkeypatch.setattr(fp8_kernels, "quantize_rows_triton", broken)
    with caplog.at_level(logging.ERROR):
        assert fp8_kernels.fp8_kernels_work(cpu, torch.float32, quantize_rows) is False
    assert "failed to run here" in caplog.text

    def one_bit_off(x):  # torch's quantisation with one element's last bit flipped
        q, s = quantize_rows(x)
        bits = q.view(torch.uint8).clone()
        bits[0, 0] ^= 1
        return bits.view(torch.float8_e4m3fn), s

    def reference_gemm(x, qw, sw, out_dtype, counters, sms):
        return (x.float() @ (qw.float() * sw.view(-1, 1)).T).to(out_dtype)
    monkeypatch.setattr(fp8_kernels, "_WORKS", {})
    monkeypatch.setattr(fp8_kernels, "weight_only_gemm", reference_gemm)
    monkeypatch.setattr(fp8_kernels, "quantize_rows_triton", one_bit_off)
    with pytest.raises(RuntimeError, match="other bits"):
        fp8_kernels.fp8_kernels_work(cpu, torch.float32, quantize_rows)
    monkeypatch.setattr(fp8_kernels, "quantize_rows_triton", quantize_rows)
    assert fp8_kernels.fp8_kernels_work(cpu, torch.float32, quantize_rows) is True


def _lin(n=48, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Fp8Linear(torch.randn(n, k, generator=g), torch.float32)


def test_fp8linear_takes_its_chosen_path_except_in_a_batch_invariant_step():
    lin = _lin()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    w8a8, weight_only = lin.run(x, "w8a8"), lin.run(x, "weight_only")
    assert not torch.equal(w8a8, weight_only)  # x quantised or not: other bits
    assert torch.equal(lin(x), w8a8)  # no choice made: W8A8
    lin.paths[4] = "weight_only"
    assert torch.equal(lin(x), weight_only)
    with invariant_step(True):  # a seeded row's bits never follow the batch: W8A8
        assert torch.equal(lin(x), lin.run(x, "w8a8"))
        assert not torch.equal(lin(x), lin.run(x, "weight_only"))
    big = torch.randn(WEIGHT_ONLY_MAX_M + 1, 64)
    lin.paths[big.shape[0]] = "weight_only"  # past the kernel's rows: W8A8 after all
    assert lin.path(big.shape[0]) == "w8a8" and torch.equal(lin(big), lin.run(big, "w8a8"))
    assert lin.gpu_kernels(4) == 1 and lin.gpu_kernels(3) == 2
    assert Fp8Linear(torch.randn(16, 16), torch.float32, "tensorwise").gpu_kernels(3) == 4


class _Model:
    def __init__(self, layers=2):
        self.device = torch.device("cpu")
        self.layers = [dict(qkv=_lin(96, 64, i), o=_lin(64, 64, i), gate_up=_lin(128, 64, i),
                            down=_lin(64, 64, i)) for i in range(layers)]


def test_measured_choice_keeps_the_faster_path_per_projection_and_bucket(caplog):
    model = _Model()
    asked = []

    def measure(lin, m, path):
        asked.append((lin.out_features, m, path))
        # weight-only is faster below 8 rows for every projection but o, which never is
        wins = m < 8 and lin.out_features != 64
        return 1.0 if (path == "weight_only") == wins else 2.0
    buckets = [1, 4, 8, WEIGHT_ONLY_MAX_M + 8]
    with caplog.at_level(logging.INFO):
        chosen = choose_fp8_paths(model, buckets, measure)
    assert chosen["qkv"] == chosen["gate_up"] == {1: "weight_only", 4: "weight_only",
                                                  8: "w8a8", WEIGHT_ONLY_MAX_M + 8: "w8a8"}
    assert set(chosen["o"].values()) == {"w8a8"}
    assert all(m <= WEIGHT_ONLY_MAX_M for _, m, _ in asked)  # no kernel to time past it
    for layer in model.layers:  # every layer takes layer 0's choice
        assert layer["qkv"].paths == chosen["qkv"] and layer["down"].paths == chosen["down"]
    assert "measured" in caplog.text and "1.000 vs 2.000 ms" in caplog.text


def test_off_cuda_the_rule_chooses_without_measuring():
    model = _Model(1)
    chosen = choose_fp8_paths(model, [1, RULE_MAX_M, RULE_MAX_M + 1])
    assert chosen["down"] == {1: "weight_only", RULE_MAX_M: "weight_only",
                              RULE_MAX_M + 1: "w8a8"}
    assert model.layers[0]["o"].path(1) == "weight_only"
