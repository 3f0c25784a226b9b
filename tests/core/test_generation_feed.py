"""The tests' helpers feed and set_counters (tests/core/gen_helpers.py), which advance a
Generation (core/generation.py) outside a scheduler: the frames come back, and every counter
and the grammar state follow, as the generation's public properties read them and as its
detach hands them back, whether it holds a batch row or not (one without goes through a
scratch row, attached and detached again)."""

import pytest

from orpheus_svc.core import tokens as T
from orpheus_svc.core.batch import BatchState
from orpheus_svc.core.generation import Generation
from orpheus_svc.core.grammar import AudioGrammarError
from orpheus_svc.core.request import GenerationRequest

from .gen_helpers import feed, set_counters

REQ = GenerationRequest("s", 0, (1, 2, 3), 100)
FRAME = [T.audio_token_id(p, 10 * p + 1) for p in range(7)]


def generation(attached: bool):
    g = Generation(7, REQ, 0.0, seed=5)
    if attached:
        g.attach(BatchState(4), 2)
    return g


@pytest.mark.parametrize("attached", [False, True], ids=["own", "batch-row"])
def test_feeding_a_frame_and_more_returns_the_frame_and_moves_every_counter(attached):
    g = generation(attached)
    assert feed(g, FRAME[:3]) == []
    assert (g.num_generated, g.frame_position, g.last_token) == (3, 3, FRAME[2])
    assert g.parser._pending == [1, 11, 21] and not g.stop_allowed
    assert feed(g, FRAME[3:] + FRAME[:2]) == [(1, 11, 21, 31, 41, 51, 61)]
    assert (g.num_generated, g.frame_position, g.last_token) == (9, 2, FRAME[1])
    assert g.parser.frames == 1 and g.parser._pending == [1, 11]
    assert feed(g, FRAME[2:]) == [(1, 11, 21, 31, 41, 51, 61)]
    assert g.parser.frames == 2 and g.parser._pending == [] and g.stop_allowed
    assert feed(g, [T.END_OF_SPEECH_ID]) == []
    assert g.parser.stopped and not g.stop_allowed and g.num_generated == 15
    if attached:
        g.detach()
        assert g.parser.stopped and g.num_generated == 15 and g.parser.frames == 2


@pytest.mark.parametrize("attached", [False, True], ids=["own", "batch-row"])
def test_a_refused_token_is_counted_and_the_state_kept(attached):
    g = generation(attached)
    feed(g, FRAME[:2])
    with pytest.raises(AudioGrammarError):
        feed(g, [FRAME[0]])  # position 2 expected
    assert g.num_generated == 3 and g.last_token == FRAME[0] and g.frame_position == 2
    assert g.parser._pending == [1, 11]


def test_set_counters_on_a_batch_row_keeps_it_attached():
    batch = BatchState(4)
    g = Generation(7, REQ, 0.0, seed=5)
    g.attach(batch, 1)
    set_counters(g, num_generated=4, last_token=FRAME[3], position=4)
    assert int(batch.num_generated[1]) == 4 and int(batch.gen_id[1]) == 7
    assert g.num_generated == 4 and g.frame_position == 4
    set_counters(g, num_generated=5)  # still the batch's row
    assert int(batch.num_generated[1]) == 5 and g.last_token == FRAME[3]
    g.detach()
    assert int(batch.gen_id[1]) == -1 and g.num_generated == 5


def test_set_counters_without_a_batch_row_leaves_none_and_keeps_the_slot():
    g = Generation(7, REQ, 0.0, seed=5, slot=3)
    set_counters(g, num_generated=2, last_token=FRAME[1], position=2, pending=(1, 11))
    assert g.slot == 3 and g.row().slot == 3 and not g.row().prefill
    batch = BatchState(4)
    g.attach(batch, 0)  # its own copy, as set, goes to the row it gets
    assert int(batch.num_generated[0]) == 2 and g.parser._pending == [1, 11]
