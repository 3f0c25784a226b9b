"""The audio-grammar logits processor (CPU tensors; TensorRT-LLM calls it the same way)."""

import pickle

import pytest
import torch

from orpheus_svc.core.grammar import position_id_range, state_after_token
from orpheus_svc.core.tokens import (
    AUDIO_BASE,
    END_OF_SPEECH_ID,
    ORPHEUS_VOCAB_SIZE,
    audio_token_id,
)
from orpheus_svc.engine.trtllm.grammar import AudioGrammarLogitsProcessor

PROMPT = [128259, 128000, 40, 128009, 128260, 128261, 128257]


def _allowed(tokens, vocab=ORPHEUS_VOCAB_SIZE):
    logits = torch.zeros(1, 1, vocab)
    AudioGrammarLogitsProcessor()(7, logits, [tokens], None, None)
    return torch.isfinite(logits[0, 0]).nonzero().flatten().tolist()


def test_the_state_follows_the_last_token():
    assert state_after_token(PROMPT[-1]) == (0, False)
    assert state_after_token(None) == (0, False)
    assert state_after_token(audio_token_id(0, 0)) == (1, False)
    assert state_after_token(audio_token_id(5, 4095)) == (6, False)
    assert state_after_token(audio_token_id(6, 0)) == (0, True)


def test_an_empty_sequence_gets_position_0_without_stop():
    assert _allowed([]) == list(range(*position_id_range(0)))


def test_after_the_prompt_only_position_0_ids_are_legal_and_no_stop():
    start, stop = position_id_range(0)
    assert _allowed(PROMPT) == list(range(start, stop))


@pytest.mark.parametrize("last_position", range(6))
def test_inside_a_frame_only_the_next_positions_ids_are_legal(last_position):
    start, stop = position_id_range(last_position + 1)
    assert _allowed(PROMPT + [audio_token_id(last_position, 17)]) == list(range(start, stop))


def test_the_stop_id_is_legal_only_at_a_frame_boundary_after_a_frame():
    allowed = _allowed(PROMPT + [audio_token_id(p, 1) for p in range(7)])
    assert END_OF_SPEECH_ID in allowed
    assert [i for i in allowed if i != END_OF_SPEECH_ID] == list(range(*position_id_range(0)))


def test_padding_rows_of_a_wider_head_are_masked():
    allowed = _allowed(PROMPT, vocab=ORPHEUS_VOCAB_SIZE + 64)
    assert max(allowed) < AUDIO_BASE + 4096


def test_sampling_after_the_mask_stays_in_the_grammar():
    gen = torch.Generator().manual_seed(0)
    proc = AudioGrammarLogitsProcessor()
    tokens = list(PROMPT)
    for _ in range(21):
        logits = torch.randn(1, 1, ORPHEUS_VOCAB_SIZE, generator=gen)
        proc(1, logits, [tokens], None, None)
        tokens.append(int(torch.multinomial(logits[0, 0].softmax(-1), 1, generator=gen)))
    positions = [(t - AUDIO_BASE) // 4096 for t in tokens[len(PROMPT):]]
    assert positions == [0, 1, 2, 3, 4, 5, 6] * 3


def test_the_processor_pickles_without_its_tensors():
    proc = AudioGrammarLogitsProcessor()
    proc(1, torch.zeros(1, 1, ORPHEUS_VOCAB_SIZE), [PROMPT], None, None)
    copy = pickle.loads(pickle.dumps(proc))
    assert copy._tables == {} and proc._tables
    assert _allowed(PROMPT) == list(range(*position_id_range(0)))
