"""The roofline arithmetic behind the sim profiles (docs/capacity.md)."""

import pytest

from orpheus_svc.engine.sim import profiles as sp
from orpheus_svc.models.llama_config import orpheus_3b_spec


def test_shapes_match_the_real_orpheus_3b_spec():
    """The shapes come from orpheus_3b_spec; checked here against the Llama-3.2-3B
    arithmetic written out by hand, so a wrong spec cannot pass by agreeing with itself."""
    spec = orpheus_3b_spec()
    hidden, inter, layers, q_dim, kv_dim = 3072, 8192, 28, 24 * 128, 8 * 128
    per_layer = 2 * hidden * q_dim + 2 * hidden * kv_dim + 3 * hidden * inter + 2 * hidden
    assert sp.LAYER_PARAMS == layers * per_layer + hidden == 2_818_747_392
    assert sp.HEAD_PARAMS == 156_940 * hidden
    assert sp.LAYER_PARAMS + sp.HEAD_PARAMS == spec.num_parameters()
    assert sp.KV_BYTES_PER_TOKEN == layers * 2 * kv_dim * 2 == 114_688
    assert sp.VOCAB == spec.vocab_size == 156_940


def test_decode_step_is_weights_plus_kv_over_bandwidth_plus_overhead():
    p = sp.get_profile("h100-fp8")
    batch, ctx = 8, 500
    expected = (p.step_overhead_s + p.weight_bytes / p.bandwidth
                + sp.KV_BYTES_PER_TOKEN * batch * ctx / p.bandwidth
                + batch * sp.VOCAB * 12 / p.bandwidth)
    assert p.step_seconds(batch, batch * ctx) == pytest.approx(expected)


def test_large_prefill_is_compute_bound():
    p = sp.get_profile("h100-fp8")
    tokens = 8192
    t = p.step_seconds(0, 0, 1, tokens, tokens * tokens)
    assert t > p.step_overhead_s + 2 * sp.LAYER_PARAMS * tokens / p.flops


def test_step_time_grows_with_batch_and_context():
    p = sp.get_profile("rtx4090-fp8")
    assert p.decode_seconds(64, 500) > p.decode_seconds(32, 500) > p.decode_seconds(1, 500)
    assert p.decode_seconds(32, 2000) > p.decode_seconds(32, 500)
    assert p.step_seconds(0, 0) == 0.0


def test_realtime_batch_is_the_largest_batch_at_82_tokens_per_second():
    p = sp.get_profile("h100-fp8")
    b = p.realtime_batch(760)
    assert p.decode_seconds(b, 760) <= 1 / 82.03 < p.decode_seconds(b + 1, 760)


def test_codec_cost_per_frame_falls_with_batch():
    p = sp.get_profile("h100-fp8")
    assert p.codec_seconds(64) / 64 < p.codec_seconds(4) / 4
    assert p.codec_seconds(0) == 0.0


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(KeyError, match="h100-fp8"):
        sp.get_profile("tpu")


# The profiles fitted to a GPU: (profile, the summary's weights key, card results directory)
_MEASURED = [("h200-bf16", "bf16", "gpu-engine-h200"), ("h200-fp8", "fp8", "gpu-engine-h200")]


@pytest.mark.parametrize("name,weights,results", _MEASURED)
def test_a_measured_profile_agrees_with_its_card_within_a_quarter(name, weights, results):
    """The sim profile of a card this project measured models the measured graph step
    (bench/results/<card>/summary.json, context 500: the run-ahead period, which is the
    device's, and the one-at-a-time step, which adds the host's launch and read) within
    25% at batch 1, 64 and 256 (issue 28; docs/capacity.md)."""
    import json
    from pathlib import Path

    summary = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results" / results
                          / "summary.json").read_text())
    assert summary["card"].startswith("NVIDIA")  # a real card, not the dry run
    if weights == "fp8":
        assert summary["fp8_gemm"] == "rowwise"  # the gemm the profile was fitted to
    p = sp.get_profile(name)
    for batch in ("1", "64", "256"):
        model_ms = p.decode_seconds(int(batch), 500) * 1000
        for key in ("ahead_ms", "step_ms"):
            measured = summary[key][weights][batch]
            assert abs(model_ms - measured) / measured <= 0.25, (name, key, batch, model_ms,
                                                                 measured)
