"""Our LoRA against the real libraries: a row on an adapter gets the logits HF transformers +
peft give for the same input, in float64, at prefill and at each decode step.

The adapters are made with peft itself (LoraConfig, get_peft_model, B non-zero,
save_pretrained; tests/engine/lora_fixtures.py), plain and rsLoRA, of two ranks, one on
every projection and one on three; the reference loads the saved directory with
PeftModel.from_pretrained, so both read the same bytes. Each row runs in a batch beside a
base row and a row on the other adapter, so a row that picked up a batch-mate's adapter
(or none) fails too."""

import warnings

import pytest
import torch

from orpheus_svc.core.tokens import AUDIO_BASE, CODES_PER_POSITION, FRAME_TOKENS
from orpheus_svc.engine.model.llama import SlotLlama
from orpheus_svc.models.adapters import read_adapter

from .lora_fixtures import hf_base
from .tiny import tiny_spec

PROMPT = [128259, 128000, 40, 41, 42, 128009, 128260, 128261, 128257]
AUDIO = slice(AUDIO_BASE, AUDIO_BASE + FRAME_TOKENS * CODES_PER_POSITION)


@pytest.fixture
def adapters(peft_adapters):
    return peft_adapters


def _reference(w, path):
    from peft import PeftModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PeftModel.from_pretrained(hf_base(w, torch.float64), str(path)).to(
            torch.float64).eval()


def _ours(w, paths):
    model = SlotLlama(tiny_spec(), dict(w), num_slots=6, max_seq_len=64, dtype=torch.float64,
                      max_adapters=3, max_lora_rank=16)
    # transformers computes RoPE's angles in float32 whatever the model's dtype: take its
    # tables, so the comparison below is of everything else at float64
    hf = hf_base(w, torch.float64)
    x = torch.zeros((1, 64, tiny_spec().head_dim), dtype=torch.float64)
    cos, sin = hf.model.rotary_emb(x, torch.arange(64)[None])
    model.cos, model.sin = cos[0], sin[0]
    for index, path in enumerate(paths):
        ad = read_adapter(path, tiny_spec(), 16)
        model.lora.install(index, ad.layers, ad.spec.scaling)
    return model


@pytest.mark.parametrize("which", ["plain", "rs"])
def test_a_row_on_an_adapter_gets_peft_logits_at_prefill_and_decode(adapters, which):
    w, paths = adapters
    ref = _reference(w, paths[which])
    model = _ours(w, [paths["plain"], paths["rs"]])
    mine = 0 if which == "plain" else 1
    other = 1 - mine
    head = model.lm_head
    tokens = list(PROMPT)
    # row 1 is ours; rows 0 and 2 (the base model, the other adapter) share its batch
    hidden = model.prefill([0, 1, 2], [PROMPT, PROMPT, PROMPT[:7]], adapters=[-1, mine, other])
    worst = 0.0
    for step in range(4):
        with torch.no_grad():
            want = ref(torch.tensor([tokens])).logits[0, -1, AUDIO]
        got = (hidden[1] @ head[AUDIO].T)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9), (step, (got - want).abs().max())
        worst = max(worst, float((got - want).abs().max()))
        nxt = AUDIO_BASE + step * CODES_PER_POSITION + int(want[step * CODES_PER_POSITION:
                                                              (step + 1) * CODES_PER_POSITION]
                                                         .argmax())
        pos = len(tokens)
        tokens.append(nxt)
        hidden = model.decode([0, 1, 2], [nxt, nxt, nxt], [pos, pos, 6],
                              adapters=[-1, mine, other])
    # the adapter changes the logits (so the comparison above could fail)
    with torch.no_grad():
        base = hf_base(w, torch.float64)(torch.tensor([tokens])).logits[0, -1, AUDIO]
    assert float((base - want).abs().max()) > 1e-3


def test_base_rows_beside_adapter_rows_are_the_base_model(adapters):
    w, paths = adapters
    model = _ours(w, [paths["plain"]])
    with torch.no_grad():
        want = hf_base(w, torch.float64)(torch.tensor([PROMPT]), output_hidden_states=True)
    hidden = model.prefill([0, 1], [PROMPT, PROMPT], adapters=[0, -1])
    final = want.hidden_states[-1][0, -1]
    assert torch.allclose(hidden[1], final, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(hidden[0], final, rtol=1e-3, atol=1e-3)
