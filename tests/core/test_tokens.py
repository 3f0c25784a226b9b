import numpy as np
import pytest
from hypothesis import given, strategies as st

from orpheus_svc.core import grammar as G
from orpheus_svc.core import tokens as T


@given(st.integers(0, 6), st.integers(0, 4095))
def test_audio_token_id_round_trips(position, code):
    assert G.split_audio_token(T.audio_token_id(position, code)) == (position, code)


def test_audio_token_id_rejects_code_4096_and_bad_position():
    with pytest.raises(ValueError):
        T.audio_token_id(0, 4096)
    with pytest.raises(ValueError):
        T.audio_token_id(7, 0)
    with pytest.raises(G.AudioGrammarError):
        G.split_audio_token(T.AUDIO_BASE - 1)


@given(st.lists(st.lists(st.integers(0, 4095), min_size=7, max_size=7), max_size=20))
def test_frames_codebooks_and_token_ids_round_trip(frames):
    frames = np.asarray(frames, dtype=np.int64).reshape(-1, 7)
    c0, c1, c2 = T.frames_to_codebooks(frames)
    assert len(c0) == len(frames) and len(c1) == 2 * len(frames) and len(c2) == 4 * len(frames)
    np.testing.assert_array_equal(T.codebooks_to_frames(c0, c1, c2), frames)
    np.testing.assert_array_equal(G.parse_frames(T.frames_to_token_ids(frames)), frames)


def test_codebook_mapping_follows_orpheus_positions():
    frame = np.array([[10, 11, 12, 13, 14, 15, 16]])
    c0, c1, c2 = T.frames_to_codebooks(frame)
    assert c0.tolist() == [10]
    assert c1.tolist() == [11, 14]
    assert c2.tolist() == [12, 13, 15, 16]


def test_parser_keeps_phase_through_code_zero():
    frames = np.array([[0, 0, 0, 0, 0, 0, 0], [4095, 0, 1, 0, 4095, 0, 7]])
    ids = T.frames_to_token_ids(frames)
    parser = G.FrameParser()
    got = []
    for tid in ids:  # one token at a time, as the engine feeds it
        got.extend(parser.feed([tid]))
    np.testing.assert_array_equal(np.array(got), frames)
    assert parser.position == 0


def test_parser_rejects_code_4096():
    # "code 4096 at position 0" is, as an id, position 1's code 0: illegal at position 0.
    with pytest.raises(G.AudioGrammarError):
        G.FrameParser().feed([T.AUDIO_BASE + 4096])
    parser = G.FrameParser()
    parser.feed([T.audio_token_id(0, 5)])
    with pytest.raises(G.AudioGrammarError):
        parser.feed([T.AUDIO_BASE + 1 * 4096 + 4096])


def test_parser_accepts_stop_only_at_frame_boundary():
    parser = G.FrameParser()
    parser.feed([T.audio_token_id(0, 1)])
    with pytest.raises(G.AudioGrammarError):
        parser.feed([T.END_OF_SPEECH_ID])
    parser = G.FrameParser()
    frames = parser.feed(T.frames_to_token_ids(np.zeros((1, 7), dtype=int)) + [T.END_OF_SPEECH_ID])
    assert len(frames) == 1 and parser.stopped
    with pytest.raises(G.AudioGrammarError):
        parser.feed([T.audio_token_id(0, 1)])


def test_frame_is_2048_samples_and_real_time_is_82_tokens_per_second():
    assert T.SAMPLES_PER_FRAME == 2048
    assert abs(T.FRAME_SECONDS * 1000 - 85.333) < 0.01
    assert abs(T.TOKENS_PER_SECOND - 82.03) < 0.01


def test_frames_and_samples_convert_in_whole_frames():
    assert T.samples_for_frames(3) == 6144 and type(T.samples_for_frames(3)) is int
    assert T.frames_for_samples(6144) == 3 and type(T.frames_for_samples(6144)) is int
    assert T.frames_for_samples(4095) == 1 and T.frames_for_samples(2047) == 0


def test_the_grammar_state_after_a_token_alone():
    """A prompt's end (no token, or no audio id) is position 0 without stop; an audio id
    says its position's successor, and after position 6 (a frame ended) stop is legal."""
    assert G.state_after_token(None) == (0, False)
    assert G.state_after_token(T.START_OF_SPEECH_ID) == (0, False)
    assert G.state_after_token(T.AUDIO_BASE - 1) == (0, False)
    assert G.state_after_token(T.AUDIO_BASE + T.AUDIO_VOCAB) == (0, False)  # one past audio
    assert G.state_after_token(T.AUDIO_BASE + T.AUDIO_VOCAB - 1) == (0, True)
    for position in range(6):
        assert G.state_after_token(T.audio_token_id(position, 4095)) == (position + 1, False)
    assert G.state_after_token(T.audio_token_id(6, 0)) == (0, True)


def test_token_ids_to_frames_inverts_frames_to_token_ids():
    from orpheus_svc.core.tokens import frames_to_token_ids, token_ids_to_frames

    frames = np.random.default_rng(5).integers(0, 4096, (9, 7))
    frames[0] = 0
    frames[1] = 4095
    ids = frames_to_token_ids(frames)
    assert np.array_equal(token_ids_to_frames(ids), frames)
    assert frames_to_token_ids(token_ids_to_frames(ids)) == ids


@pytest.mark.parametrize("cut, says", [("partial", "not whole frames"),
                                       ("wrong position", "at index 3 is not an audio id of frame position 3"),
                                       ("stop id", "at index 13"),
                                       ("text id", "token 128000 at index 0")])
def test_token_ids_to_frames_refuses_what_is_not_whole_frames(cut, says):
    from orpheus_svc.core.tokens import frames_to_token_ids, token_ids_to_frames

    ids = frames_to_token_ids(np.zeros((2, 7), dtype=np.int64))
    bad = {"partial": ids[:-1],
           "wrong position": ids[:3] + [ids[4]] + ids[4:],  # 14 ids: position 3 holds a position-4 id
           "stop id": ids[:-1] + [128258],
           "text id": [128000] + ids[1:]}[cut]
    with pytest.raises(ValueError, match=says):
        token_ids_to_frames(bad)
