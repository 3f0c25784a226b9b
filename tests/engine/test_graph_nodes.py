"""The graph step's kernel count (engine/graph/nodes.py; issue 32 item 6): counted on the CPU,
it fails when a change adds kernels to the fused step. The budgets are today's counts:
lower them when a change removes kernels (the fused token choice, issue 32 item 5, would
cut most of OTHER), never raise them without saying why in the commit."""

from orpheus_svc.engine.graph.nodes import count_step_nodes

from .test_graph_backend import _graph

# Per layer: the 4 GEMMs (qkv, o, gate/up, down), rope_qkv with the K/V write, the two-pass
# attention, silu_mul and two add_rms_norm. Other: the embedding gather, a new prompt's
# state (start_prompts), the final norm, the LM head and the token choice (~90).
FUSED_PER_LAYER = 10
FUSED_OTHER = 105


def test_the_fused_step_launches_no_more_kernels_than_it_did():
    runner = _graph(max_batch=8).runner
    fused = count_step_nodes(runner, 8, fused=True)
    assert fused["layers"] == 2
    assert fused["per_layer"] <= FUSED_PER_LAYER, fused["ops"]
    assert fused["other"] <= FUSED_OTHER, fused["ops"]
    eager = count_step_nodes(runner, 8, fused=False)
    assert eager["per_layer"] > 4 * fused["per_layer"] - 1  # what the fusion saves per layer
    assert fused["ops"]["fused.rope_qkv"] == 2 and fused["ops"]["attention"] == 4


def test_the_fp8_step_launches_no_more_kernels_than_bf16s():
    """Each FP8 projection counts as its CUDA kernels (Fp8Linear.gpu_kernels): at 8 rows the
    weight-only GEMM, one kernel as bf16's matmul; W8A8 adds the quantisation kernel."""
    bf16 = count_step_nodes(_graph(max_batch=8).runner, 8)
    runner = _graph("fp8", max_batch=8).runner
    assert runner.fp8_paths["down"][8] == "weight_only"
    fp8 = count_step_nodes(runner, 8)
    assert fp8["total"] <= bf16["total"] and fp8["per_layer"] <= bf16["per_layer"], fp8["ops"]
    assert fp8["ops"]["fp8.weight_only"] == 4 * fp8["layers"]
    for layer in runner.model.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            layer[name].paths[8] = "w8a8"
    w8a8 = count_step_nodes(runner, 8)
    assert w8a8["per_layer"] == fp8["per_layer"] + 4  # quantisation + _scaled_mm per GEMM
