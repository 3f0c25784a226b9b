"""The sim's LoRA cost (engine/sim/profiles.py GpuProfile.lora_seconds, paper): a step pays
for each distinct adapter in it and for the tokens on adapters, nothing without a pool."""

import dataclasses

import pytest

from orpheus_svc.engine.sim.profiles import LORA_KERNELS, LORA_PARAMS_PER_RANK, get_profile

from tests.core.gen_helpers import set_counters

from .test_sim_backend import FakeClock, _plan, backend, make_gen

H200 = get_profile("h200-bf16")


def test_lora_params_per_rank_is_orpheus_3b_s():
    # 28 layers x (q 3072+3072, k 3072+1024, v 3072+1024, o 3072+3072, gate and up
    # 3072+8192 each, down 8192+3072)
    assert LORA_PARAMS_PER_RANK == 28 * 54272


def test_the_cost_grows_with_adapters_tokens_and_rank():
    fixed = LORA_KERNELS * H200.lora_kernel_s
    assert H200.lora_seconds(0, 0, 16) == pytest.approx(fixed)
    assert H200.lora_seconds(5, 100, 0) == 0.0
    one, eight = H200.lora_seconds(1, 64, 16), H200.lora_seconds(8, 64, 16)
    assert fixed < one < eight
    assert eight - fixed == pytest.approx(8 * 16 * LORA_PARAMS_PER_RANK * 2 / H200.bandwidth)
    assert H200.lora_seconds(8, 64, 64) > eight


def _step_seconds(adapters, **kw):
    clock = FakeClock()
    be = backend(clock, **kw)
    gens = [make_gen(i) for i in range(32)]
    for g, a in zip(gens, adapters):
        g.request = dataclasses.replace(g.request, adapter=a)
    be.step(_plan(1, prefill=gens))
    for g in gens:
        set_counters(g, num_generated=1)
    clock.sleeps.clear()
    be.step(_plan(2, decode=gens))
    return clock.sleeps[-1]


def test_a_sim_step_pays_for_the_adapters_of_its_rows():
    pool = dict(max_adapters=16, lora_rank=16)
    base = _step_seconds([-1] * 32)
    assert _step_seconds([-1] * 32, **pool) == pytest.approx(
        base + LORA_KERNELS * get_profile("h100-fp8").lora_kernel_s)
    four = _step_seconds([i % 4 for i in range(32)], **pool)
    sixteen = _step_seconds([i % 16 for i in range(32)], **pool)
    assert base < four < sixteen
    assert backend(**pool).capabilities.max_adapters == 16
    assert backend().capabilities.max_adapters == 0
