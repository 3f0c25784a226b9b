"""The graph step's kernel count (engine/graph/nodes.py; issue 32 item 6): counted on the CPU,
it fails when a change adds kernels to the fused step. The budgets are today's counts:
lower them when a change removes kernels, never raise them without saying why in the
commit."""

from orpheus_svc.engine.graph.nodes import count_step_nodes

from .test_graph_backend import _graph

# Per layer: the 4 GEMMs (qkv, o, gate/up, down), rope_qkv with the K/V write, the two-pass
# attention, silu_mul and two add_rms_norm. Other: the embedding gather, a new prompt's
# state (start_prompts), the final norm, the audio GEMM of the head, the token choice
# kernel (engine/graph/choose.py: stop logit, penalty, top-p, draw, state writes) and the
# copy of the ids out.
FUSED_PER_LAYER = 10
FUSED_OTHER = 15


def test_the_fused_step_launches_no_more_kernels_than_it_did():
    runner = _graph(max_batch=8).runner
    fused = count_step_nodes(runner, 8, fused=True)
    assert fused["layers"] == 2
    assert fused["per_layer"] <= FUSED_PER_LAYER, fused["ops"]
    assert fused["other"] <= FUSED_OTHER, fused["ops"]
    eager = count_step_nodes(runner, 8, fused=False)
    assert eager["per_layer"] > 4 * fused["per_layer"] - 1  # what the fusion saves per layer
    assert fused["ops"]["fused.rope_qkv"] == 2 and fused["ops"]["attention"] == 4
    assert fused["ops"]["fused.choose"] == 1 and "sort" not in fused["ops"]


def test_the_fp8_step_launches_no_more_kernels_than_bf16s():
    """Each FP8 projection counts as its CUDA kernels (Fp8Linear.gpu_kernels): at 8 rows the
    weight-only GEMM, one kernel as bf16's matmul."""
    bf16 = count_step_nodes(_graph(max_batch=8).runner, 8)
    runner = _graph("fp8", max_batch=8).runner
    assert runner.fp8_paths["down"][8] == "weight_only"
    fp8 = count_step_nodes(runner, 8)
    assert fp8["total"] <= bf16["total"] and fp8["per_layer"] <= bf16["per_layer"], fp8["ops"]
    assert fp8["ops"]["fp8.weight_only"] == 4 * fp8["layers"]


def test_the_fp8_step_at_a_w8a8_bucket_launches_no_more_kernels_than_bf16s():
    """On the W8A8 path each GEMM's input comes quantised from the kernel that produces it
    (the norms, the SiLU-mul, the attention reduce: engine/graph/fused.py, attention.py), so
    each projection is _scaled_mm alone; a quantisation kernel of its own would add 4 per
    layer."""
    bf16 = count_step_nodes(_graph(max_batch=8).runner, 8)
    runner = _graph("fp8", max_batch=8).runner
    for layer in runner.model.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            layer[name].paths[8] = "w8a8"
    w8a8 = count_step_nodes(runner, 8)
    assert w8a8["per_layer"] <= bf16["per_layer"], w8a8["ops"]
    assert w8a8["total"] <= bf16["total"], w8a8["ops"]
    ops = w8a8["ops"]
    assert ops["fp8.w8a8"] == 4 * w8a8["layers"], ops  # one kernel per GEMM
    # every producer of an FP8 GEMM's input took its quantising form; the last norm feeds
    # the LM head (bf16) and does not
    assert ops["fused.add_rms_norm_fp8"] == 2 * w8a8["layers"] - 1, ops
    assert ops["fused.add_rms_norm"] == 1, ops
    assert ops["fused.silu_mul_fp8"] == w8a8["layers"] and ops["fused.rms_norm_fp8"] == 1, ops
