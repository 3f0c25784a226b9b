"""One audio grammar (core/grammar.py): the parser, the per-row state the scheduler hands a
backend, and the state the trtllm processor reads from the last token all follow one rule."""

import pytest

from orpheus_svc.core import grammar as G
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.request import GenerationRequest
from orpheus_svc.core.tokens import END_OF_SPEECH_ID, FRAME_TOKENS, audio_token_id

from .gen_helpers import feed

PROMPT = (128259, 128000, 40, 128009, 128260, 128261, 128257)


def _speech(frames):
    return [audio_token_id(p, 3 * f + p) for f in range(frames) for p in range(FRAME_TOKENS)]


def test_the_stop_id_before_the_first_frame_is_a_violation():
    parser = G.FrameParser()
    assert not parser.stop_allowed
    with pytest.raises(G.AudioGrammarError, match="before the first frame"):
        parser.feed([END_OF_SPEECH_ID])


def test_parser_state_and_last_token_state_agree_along_a_stream():
    tokens = _speech(3)
    parser = G.FrameParser()
    assert (parser.position, parser.stop_allowed) == G.state_after_token(PROMPT[-1])
    for n, tok in enumerate(tokens, 1):
        parser.feed([tok])
        assert (parser.position, parser.stop_allowed) == G.state_after_token(tok)
        assert parser.position == n % FRAME_TOKENS and parser.frames == n // FRAME_TOKENS
        assert parser.stop_allowed == G.stop_allowed(n % FRAME_TOKENS, n // FRAME_TOKENS)
    parser.feed([END_OF_SPEECH_ID])
    assert parser.stopped and not parser.stop_allowed


def test_a_generations_row_carries_the_grammar_state_of_its_parser():
    req = GenerationRequest("s", 0, PROMPT, max_tokens=70)
    gen = Generation(gen_id=1, request=req, arrival=0.0, seed=5, slot=2)
    row = gen.row()
    assert row.prefill and row.last_token is None and row.position == 0
    assert (row.frame_position, row.stop_allowed) == (0, False)
    feed(gen, _speech(1) + [audio_token_id(0, 9)])
    row = gen.row()
    assert not row.prefill and row.num_generated == 8 and row.last_token == audio_token_id(0, 9)
    assert row.position == len(PROMPT) + 7  # KV index of the token fed now
    assert (row.frame_position, row.stop_allowed) == (1, False)
    with pytest.raises(AttributeError):
        row.slot = 3  # frozen: a backend cannot write the scheduler's state


def test_a_parser_made_mid_stream_knows_whether_the_stop_is_legal():
    """stop_allowed is a field kept by feed_one; a parser built with a state (the batching
    benchmark restarts one after a stop) starts from that state's rule."""
    assert G.FrameParser(frames=2).stop_allowed
    assert not G.FrameParser(position=3, frames=2).stop_allowed
    assert not G.FrameParser(frames=2, stopped=True).stop_allowed
    assert not G.FrameParser().stop_allowed
