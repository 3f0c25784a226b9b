"""The repetition penalty our TensorRT-LLM logits processor applies is the torch backend's.

TensorRT-LLM 1.2's default sampler ignores SamplingParams.repetition_penalty, so the
request's processor (engine/trtllm/processor.py) applies it. Here it gets exactly the call
TensorRT-LLM makes, processor(req_id, logits[beam=1, 1, vocab], [token_ids], stream_ptr,
client_id) with token_ids = prompt + generated so far, and its logits are compared with the
ones the torch backend's own sampling path (TorchBackend.sample: SeenAudio, then
apply_repetition_penalty) hands to its sampler for the same generation.
"""

import pickle
from types import SimpleNamespace

import pytest
import torch

import orpheus_svc.engine.torch.backend as torch_backend
from orpheus_svc.core.grammar import position_id_range, state_after_token
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.core.step import StepRow
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, ORPHEUS_VOCAB_SIZE, audio_token_id
from orpheus_svc.engine.torch.backend import TorchBackend
from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor
from orpheus_svc.engine.trtllm.processor import request_processor

# A prompt that holds an audio id (a text can spell <custom_token_N>): the torch backend
# never counts the prompt, so neither may the processor.
PROMPT_AUDIO = audio_token_id(1, 7)
PROMPT = [128259, 128000, 40, PROMPT_AUDIO, 41, 128009, 128260, 128261, 128257]


def _torch_side(penalty, seed=11):
    """A TorchBackend whose LM head is one column: the logits are scale * column, computed
    the same way (one product each) by its constrained head and by a full head."""
    gen = torch.Generator().manual_seed(seed)
    head = torch.randn(ORPHEUS_VOCAB_SIZE, 1, generator=gen)
    model = SimpleNamespace(num_slots=1, device=torch.device("cpu"), lm_head=head, lora=None,
                            max_seq_len=4096)
    request = GenerationRequest("s", 0, tuple(PROMPT), 200,
                                SamplingParams(temperature=0.6, top_p=0.8,
                                               repetition_penalty=penalty))
    return TorchBackend(model), request, head, gen


def _row(request, out):
    position, stop = state_after_token(out[-1] if out else None)
    return StepRow(gen_id=1, slot=0, request=request, seed=99, prefill=not out,
                   num_generated=len(out), last_token=out[-1] if out else None,
                   position=len(PROMPT) + len(out) - 1, frame_position=position,
                   stop_allowed=stop)


@pytest.mark.parametrize("penalty", [1.1, 1.3])
@pytest.mark.parametrize("mask", [True, False])
def test_the_processor_penalises_exactly_as_the_torch_backend_does(monkeypatch, penalty, mask):
    backend, request, head, gen = _torch_side(penalty)
    handed = []  # what the torch backend hands its sampler: [1, 4097] penalised logits
    original = torch_backend.sample_rows

    def spy(logits, params):
        handed.append(logits.clone())
        return original(logits, params)

    monkeypatch.setattr(torch_backend, "sample_rows", spy)
    processor = request_processor(len(PROMPT), penalty,
                                  AudioGrammarLogitsProcessor() if mask else None)
    processor = pickle.loads(pickle.dumps(processor))  # as TensorRT-LLM's worker gets it
    out: list[int] = []
    penalised_steps, signs = 0, set()
    while len(out) < 35:
        scale = torch.randn(1, 1, generator=gen)
        raw = (scale @ head.T).view(1, 1, -1)  # TensorRT-LLM's [beam, 1, vocab] row
        logits = raw.clone()
        processor(7, logits, [PROMPT + out], None, None)  # TensorRT-LLM's call
        (token,) = backend.sample([_row(request, out)], scale)
        ref = handed[-1][0]
        position, stop_ok = state_after_token(out[-1] if out else None)
        start, stop = position_id_range(position)
        assert torch.equal(logits[0, 0, start:stop], ref[:4096]), len(out)
        changed = logits[0, 0, start:stop] != raw[0, 0, start:stop]
        if changed.any():
            penalised_steps += 1
            signs.update(raw[0, 0, start:stop][changed].sign().tolist())
        others = torch.ones(ORPHEUS_VOCAB_SIZE, dtype=torch.bool)
        others[start:stop] = False
        if mask:  # the stop id only where the torch backend has it, everything else gone
            assert torch.equal(logits[0, 0, END_OF_SPEECH_ID], ref[4096])
            others[END_OF_SPEECH_ID] = False
            assert torch.isinf(logits[0, 0, others]).all()
        else:  # the penalty touches nothing outside the position being sampled
            assert torch.equal(logits[0, 0, others], raw[0, 0, others])
        out.append(token)
        if token == END_OF_SPEECH_ID:
            break
    assert len(out) >= 21, out  # three frames at least, so positions repeat
    # From the second frame on every step has emitted ids at its position to penalise.
    assert penalised_steps == len([t for t in out if t != END_OF_SPEECH_ID]) - 7
    assert signs == {1.0, -1.0}  # both halves of the rule: divide and multiply


def test_the_prompt_and_the_stop_id_are_never_penalised():
    # every id of position 1 in the prompt; then one generated frame, the stop id, and
    # position 0 again (TensorRT-LLM could go on after the stop id only if told to)
    prompt = PROMPT[:-1] + [audio_token_id(1, c) for c in range(4096)] + PROMPT[-1:]
    first = audio_token_id(0, 3)
    logits = torch.ones(1, 1, ORPHEUS_VOCAB_SIZE)
    processor = request_processor(len(prompt), 2.0, None)
    processor(1, logits, [prompt + [first]], None, None)  # sampling position 1
    assert torch.equal(logits, torch.ones(1, 1, ORPHEUS_VOCAB_SIZE))
    frame = [first] + [audio_token_id(p, 3) for p in range(1, 7)]
    processor(1, logits, [prompt + frame + [END_OF_SPEECH_ID]], None, None)  # position 0
    assert (logits[0, 0] != 1.0).nonzero().flatten().tolist() == [first]
    assert logits[0, 0, END_OF_SPEECH_ID].item() == 1.0


def test_ids_count_once_however_often_they_came_and_only_at_their_position():
    p0 = audio_token_id(0, 5)
    seq = PROMPT + [p0] + [audio_token_id(p, 1) for p in range(1, 7)] + [p0] + \
        [audio_token_id(p, 2) for p in range(1, 7)]
    logits = torch.full((1, 1, ORPHEUS_VOCAB_SIZE), 3.0)
    request_processor(len(PROMPT), 1.5, None)(1, logits, [seq], None, None)  # at position 0
    changed = (logits[0, 0] != 3.0).nonzero().flatten().tolist()
    assert changed == [p0] and logits[0, 0, p0].item() == 2.0  # 3 / 1.5, once


def test_reading_the_sequence_step_by_step_equals_reading_it_at_once():
    gen = torch.Generator().manual_seed(5)
    seq = PROMPT + [audio_token_id(i % 7, int(c))
                    for i, c in enumerate(torch.randint(0, 40, (40,), generator=gen))]
    raw = torch.randn(1, 1, ORPHEUS_VOCAB_SIZE, generator=gen)
    stepwise = request_processor(len(PROMPT), 1.3, None)
    for k in range(len(PROMPT), len(seq)):  # TensorRT-LLM's calls, one per token
        stepwise(1, raw.clone(), [seq[:k]], None, None)
        stepwise(1, raw.clone(), [seq[:k]], None, None)  # the same sequence again
    last, whole = raw.clone(), raw.clone()
    stepwise(1, last, [seq], None, None)
    request_processor(len(PROMPT), 1.3, None)(1, whole, [seq], None, None)
    assert torch.equal(last, whole) and not torch.equal(whole, raw)


def test_a_penalty_of_one_leaves_the_logits_alone():
    seq = PROMPT + [audio_token_id(p, 9) for p in range(7)] * 3
    raw = torch.randn(1, 1, ORPHEUS_VOCAB_SIZE)
    logits = raw.clone()
    request_processor(len(PROMPT), 1.0, None)(1, logits, [seq], None, None)
    assert torch.equal(logits, raw)


def test_half_precision_logits_are_penalised_in_place():
    seq = PROMPT + [audio_token_id(0, 4)] + [audio_token_id(p, 0) for p in range(1, 7)]
    logits = torch.full((1, 1, ORPHEUS_VOCAB_SIZE), -2.0, dtype=torch.bfloat16)
    request_processor(len(PROMPT), 1.25, None)(1, logits, [seq], None, None)
    assert logits.dtype == torch.bfloat16
    assert logits[0, 0, audio_token_id(0, 4)].item() == -2.5
    assert (logits[0, 0] == -2.0).sum().item() == ORPHEUS_VOCAB_SIZE - 1
