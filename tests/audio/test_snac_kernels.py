"""The fused Triton Snake (audio/snac_kernels.py) on the CPU, through Triton's interpreter
(TRITON_INTERPRET=1, in a subprocess: the variable must be set before the kernel is
compiled), against codec._Snake, the torch Snake the CPU runs: alone in float32 and
bfloat16, through the start-up check, and as every Snake of a whole (tiny) SNAC decode."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from orpheus_svc.audio.snac_kernels import _block, snake_reference

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent("""
    import numpy as np, torch
    from orpheus_svc.audio.codec import _Snake, load_snac, write_random_snac, SNAC_24KHZ_CONFIG
    from orpheus_svc.audio.snac_kernels import fused_snake, fused_snake_works, snake_reference
    torch.manual_seed(0)
    out = {}
    def rel(a, b):
        return float((a.float() - b.float()).norm() / b.float().norm())
    def ulps(a, b):  # the largest difference in units of b's last place (bfloat16: 8 bits)
        b = b.float()
        ulp = torch.exp2(torch.floor(torch.log2(b.abs().clamp_min(1e-30))) - 7)
        return float(((a.float() - b).abs() / ulp).max())
    # lengths: below one block, not a multiple of it, several blocks; channels: row % C
    shapes = ((1, 3, 5), (2, 7, 100), (3, 4, 1500), (2, 64, 2049))
    for dtype in (torch.float32, torch.bfloat16):
        worst, worst_ref, worst_ulps = 0.0, 0.0, 0.0
        for shape in shapes:
            x = (4 * torch.randn(shape)).to(dtype)
            snake = _Snake(torch.nn.Parameter((torch.rand(1, shape[1], 1) * 2 + 0.05).to(dtype)))
            got = fused_snake(x, snake.alpha, snake.inv_alpha)
            assert got.dtype == dtype and got.shape == x.shape
            worst = max(worst, rel(got, snake(x)))
            ref = snake_reference(x, snake.alpha, snake.inv_alpha)
            worst_ref = max(worst_ref, rel(got, ref))
            worst_ulps = max(worst_ulps, ulps(got, ref))
        # a non-contiguous input (the kernel reads rows of length T)
        x = torch.randn(2, 9, 33).to(dtype).transpose(1, 2).contiguous().transpose(1, 2)
        snake = _Snake(torch.nn.Parameter(torch.rand(1, 9, 1).to(dtype) + 0.5))
        worst = max(worst, rel(fused_snake(x, snake.alpha, snake.inv_alpha), snake(x)))
        out[str(dtype)] = worst
        out[str(dtype) + " ref"] = worst_ref
        out[str(dtype) + " ulps"] = worst_ulps
    out["check"] = fused_snake_works(torch.device("cpu"), torch.float32)
    tiny = {**SNAC_24KHZ_CONFIG, "encoder_dim": 4, "decoder_dim": 16}
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        codec = load_snac(write_random_snac(d, seed=3, config=tiny), noise=False)
    frames = [np.random.default_rng(0).integers(0, 4096, (2, 7))]
    want = codec.decode_frames(frames)
    codec._set_fused_snake(True)
    got = codec.decode_frames(frames)
    out["decode"] = float(np.abs(got - want).max() / np.abs(want).max())
    print(out)
""")


def _interpret(script: str) -> dict:
    """Run `script` under Triton's interpreter; its last printed line, a dict literal."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    return eval(out.stdout.strip().splitlines()[-1])


def test_the_fused_snake_matches_the_torch_snake_in_the_interpreter():
    got = _interpret(_SCRIPT)
    assert got["torch.float32"] < 1e-6
    assert got["torch.float32 ref"] < 1e-6
    # bfloat16: the kernel rounds once, as its reference does, to within one last place
    # (the interpreter's sin and rounding are numpy's); torch's Snake rounds after each op
    assert got["torch.bfloat16 ulps"] <= 1.0
    assert got["torch.bfloat16 ref"] < 8e-3
    assert got["torch.bfloat16"] < 2e-2
    assert got["check"] is True
    assert got["decode"] < 1e-5  # a whole decode, every Snake fused


def test_blocks_are_powers_of_two_from_64_to_1024():
    assert [_block(n) for n in (1, 64, 65, 700, 1024, 1025, 40000)] == [64, 64, 128, 1024,
                                                                        1024, 1024, 1024]


def test_the_reference_is_x_plus_sin_squared_over_alpha():
    x = torch.tensor([[[0.0, 1.0, -2.0]]])
    a = torch.tensor([[[0.5]]])
    want = x + torch.sin(0.5 * x) ** 2 / 0.5
    torch.testing.assert_close(snake_reference(x, a, 1 / a), want)
