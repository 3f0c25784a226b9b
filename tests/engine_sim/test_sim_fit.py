"""The served-step terms of a sim profile and the pure parts of their fit (engine/sim/fit.py)."""

import dataclasses
import math

import numpy as np
import pytest

from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.step import StepRow
from orpheus_svc.core.tokens import AUDIO_BASE, END_OF_SPEECH_ID
from orpheus_svc.engine.sim import fit
from orpheus_svc.engine.sim.backend import SimBackend
from orpheus_svc.engine.sim.profiles import get_profile

BASE = get_profile("h200-bf16")


def level(sessions, wall, steps, batch, cpu, p95=0.3):
    return fit.ServedLevel(sessions, wall, steps, batch, 100, 40_000, cpu, p95, 0.07)


def test_a_device_only_profile_adds_nothing():
    assert BASE.served_extra_seconds(0.005, 64, 1, 70) == 0.0


def test_a_prompt_pays_the_launch_and_its_tokens_only_in_its_step():
    p = dataclasses.replace(BASE, prefill_launch_s=0.05, prefill_token_s=2e-6)
    with_prompt = p.step_seconds(10, 3000, 2, 140, 2 * 70 * 70)
    alone = BASE.step_seconds(10, 3000, 2, 140, 2 * 70 * 70)
    assert with_prompt - alone == pytest.approx(0.05 + 140 * 2e-6)
    assert p.step_seconds(10, 3000) == pytest.approx(BASE.step_seconds(10, 3000))


def test_host_work_shows_only_past_the_device_time():
    p = dataclasses.replace(BASE, host_step_s=1e-3, host_row_s=50e-6)
    small, large = 8, 200
    assert p.decode_seconds(small, 300) == pytest.approx(BASE.decode_seconds(small, 300))
    host = 1e-3 + large * 50e-6
    assert host > BASE.decode_seconds(large, 300)
    assert p.decode_seconds(large, 300) == pytest.approx(host)


def test_the_h200_server_profile_is_h200_bf16_on_the_device():
    served = get_profile("h200-server")
    device_only = dataclasses.replace(served, prefill_launch_s=0.0, prefill_token_s=0.0,
                                      host_step_s=0.0, host_row_s=0.0)
    assert device_only.decode_seconds(64, 500) == pytest.approx(BASE.decode_seconds(64, 500))
    assert served.prefill_launch_s > 0 and served.host_row_s > 0


def test_the_host_line_goes_through_both_levels():
    a, b = level(128, 44.0, 4000, 60.0, 8.0), level(256, 68.0, 3000, 160.0, 30.0)
    h0, h1 = fit.host_line([a, b])
    assert h0 + h1 * 60.0 == pytest.approx(8.0 / 4000)
    assert h0 + h1 * 160.0 == pytest.approx(30.0 / 3000)
    with pytest.raises(ValueError):
        fit.host_line([a, a])


def test_the_prefill_token_price_is_what_the_roofline_leaves_out():
    tokens = 64 * 500
    roofline = BASE.step_seconds(0, 0, 64, tokens, 64 * 500 * 500)
    assert fit.prefill_token_extra_s(BASE, 64, 500, roofline + 0.032) == pytest.approx(1e-6)
    assert fit.prefill_token_extra_s(BASE, 64, 500, roofline / 2) == 0.0


def test_misfit_is_the_largest_relative_miss():
    a, b = level(128, 40.0, 4000, 60.0, 8.0, p95=0.4), level(256, 60.0, 3000, 160.0, 30.0, p95=1.0)
    exact = [(a.period_s, a.ttfb_p95_s), (b.period_s, b.ttfb_p95_s)]
    assert fit.misfit(exact, [a, b]) == 0.0
    off = [(a.period_s, a.ttfb_p95_s * 1.1), (b.period_s * 0.8, b.ttfb_p95_s)]
    assert fit.misfit(off, [a, b]) == pytest.approx(abs(math.log(0.8)))
    assert fit.misfit([(0.0, 1.0), (1.0, 1.0)], [a, b]) == math.inf


def test_served_level_reads_a_summary_run():
    run = {"sessions": 128, "wall_s": 44.0, "ttfb_ms": {"p95": 372.0, "min": 69.6},
           "server": {"steps": 3713, "mean_batch": 66.7, "generations": 564, "tokens": 247529,
                      "threads": [{"name": "snac-flusher", "cpu_s": 28.8},
                                  {"name": "engine-core", "cpu_s": 19.5}]}}
    lv = fit.ServedLevel.from_run(run)
    assert lv.engine_cpu_s == 19.5 and lv.ttfb_p95_s == pytest.approx(0.372)
    assert lv.period_s == pytest.approx(44.0 / 3713)


def test_never_stop_streams_are_audio_to_max_tokens():
    be = SimBackend(BASE, num_slots=4, max_seq_len=512, never_stop=True)
    req = GenerationRequest(session_id="s", segment_index=0, prompt_ids=tuple(range(60)),
                            max_tokens=441, expected_frames=10)
    row = StepRow(gen_id=1, slot=0, request=req, seed=3, prefill=True, num_generated=0,
                  last_token=None, position=0, frame_position=0, stop_allowed=False)
    stream = be.token_stream(row)
    assert len(stream) == 441
    assert END_OF_SPEECH_ID not in stream and np.all(np.array(stream) >= AUDIO_BASE)
