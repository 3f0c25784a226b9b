"""Micro-batching correctness: a batch of slots at different positions computes exactly
what each generation would compute alone."""

import torch

from orpheus_svc.core.tokens import audio_token_id
from orpheus_svc.engine.model.sampling import constrained_logits

from .tiny import tiny_model

PROMPTS = [[128259, 128000, 5, 6, 7, 128009, 128260, 128261, 128257],
           [128259, 128000, 9, 128009, 128260, 128261, 128257],
           [128259, 128000, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 128009, 128260, 128261, 128257]]
EXTRA = [3, 11, 0]  # decode steps each generation takes alone first: different positions


def _tokens(g, n):
    return [audio_token_id(i % 7, (37 * g + 11 * i) % 4096) for i in range(n)]


def _advance_alone(model, slot, prompt, n):
    model.prefill([slot], [prompt])
    for i, tok in enumerate(_tokens(slot, n)):
        model.decode([slot], [tok], [len(prompt) + i])


def test_batched_prefill_equals_single_prefill():
    batched, single = tiny_model(), tiny_model()
    hb = batched.prefill([0, 1, 2], PROMPTS)
    hs = torch.cat([single.prefill([s], [p]) for s, p in enumerate(PROMPTS)])
    torch.testing.assert_close(hb, hs, rtol=1e-4, atol=1e-4)


def test_batched_decode_at_different_positions_equals_one_at_a_time():
    batched, single = tiny_model(), tiny_model()
    for slot, (prompt, n) in enumerate(zip(PROMPTS, EXTRA)):
        _advance_alone(batched, slot, prompt, n)
        _advance_alone(single, slot, prompt, n)
    positions = [len(p) + n for p, n in zip(PROMPTS, EXTRA)]
    assert len(set(positions)) == 3
    nxt = [audio_token_id(n % 7, 100 + s) for s, n in enumerate(EXTRA)]
    for step in range(5):  # several batched steps, positions keep diverging correctly
        hb = batched.decode([0, 1, 2], nxt, positions)
        hs = torch.cat([single.decode([s], [t], [p]) for s, (t, p) in enumerate(zip(nxt, positions))])
        frame_pos = [(n + step + 1) % 7 for n in EXTRA]
        lb = constrained_logits(hb, batched.lm_head, frame_pos, [True] * 3)
        ls = constrained_logits(hs, single.lm_head, frame_pos, [True] * 3)
        torch.testing.assert_close(lb, ls, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(lb[0], lb[1])  # the rows really are different generations
        positions = [p + 1 for p in positions]
        nxt = [audio_token_id(fp, 7 * step + s) for s, fp in enumerate(frame_pos)]


def test_decode_in_a_subset_and_in_another_slot_order_is_unchanged():
    a, b = tiny_model(), tiny_model()
    for m in (a, b):
        for slot, (prompt, n) in enumerate(zip(PROMPTS, EXTRA)):
            _advance_alone(m, slot, prompt, n)
    positions = [len(p) + n for p, n in zip(PROMPTS, EXTRA)]
    toks = [audio_token_id(n % 7, 5) for n in EXTRA]
    ha = a.decode([2, 0], [toks[2], toks[0]], [positions[2], positions[0]])
    hb = b.decode([0, 1, 2], toks, positions)
    torch.testing.assert_close(ha, hb[[2, 0]], rtol=1e-4, atol=1e-4)


def test_grouped_query_decode_and_explicit_kernels_compute_the_same_attention():
    # Decode folds grouped-query attention into the query ([B, heads, 1, d] as
    # [B, kv_heads, group, d]); on CUDA both passes run with explicit SDPA kernels
    # (llama.sdpa_kernels). Head kv * group + r must read K/V head kv, as Llama's repeat_kv.
    from torch.nn.attention import SDPBackend

    models = {"enable_gqa": tiny_model(), "grouped": tiny_model(), "grouped_math": tiny_model()}
    models["enable_gqa"].grouped_decode = False
    models["grouped_math"].sdpa_kernels = [SDPBackend.MATH]  # also the prefill's repeat path
    assert all(m.spec.num_attention_heads > m.spec.num_key_value_heads for m in models.values())
    out = {}
    for name, m in models.items():
        hidden = [m.prefill([0, 1, 2], PROMPTS)]
        positions = [len(p) for p in PROMPTS]
        for step in range(4):
            toks = [audio_token_id(step % 7, 17 * s + step) for s in range(3)]
            hidden.append(m.decode([2, 0, 1], toks, positions))
            positions = [p + 1 for p in positions]
        out[name] = torch.cat(hidden)
    torch.testing.assert_close(out["grouped"], out["enable_gqa"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["grouped_math"], out["enable_gqa"], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out["grouped"][:3], out["grouped"][3:6])  # steps really differ
