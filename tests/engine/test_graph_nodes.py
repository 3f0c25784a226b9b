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
