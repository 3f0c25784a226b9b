"""The late-audio counter's listener (server/lateness.py): what counts as late and how much."""

import pytest

from orpheus_svc.server.lateness import JITTER_S, ListenerClock


def test_audio_sent_ahead_of_the_player_is_never_late():
    clock = ListenerClock()
    assert clock.sent(10.0, 0.5, 9.0) == 0.0  # the first audio: the player starts after it
    assert clock.sent(10.3, 0.5, 9.0) == 0.0
    assert clock.sent(10.0 + JITTER_S + 0.99, 0.5, 9.0) == 0.0
    assert clock.late_s == 0.0


def test_a_chunk_after_the_player_ran_dry_is_late_by_the_gap_at_most_its_length():
    clock = ListenerClock()
    clock.sent(10.0, 0.5, 9.0)                     # played until 10.6
    assert clock.sent(10.8, 0.5, 9.0) == pytest.approx(0.2)   # 0.2 s of silence
    assert clock.sent(13.0, 0.1, 9.0) == pytest.approx(0.1)   # a short chunk: its length
    assert clock.late_s == pytest.approx(0.3)


def test_one_stall_is_counted_once_not_again_for_the_audio_behind_it():
    clock = ListenerClock()
    clock.sent(10.0, 0.2, 9.0)                     # played until 10.3
    assert clock.sent(11.0, 0.5, 9.0) == pytest.approx(0.5)   # the player resumes at 11.0
    assert clock.sent(11.2, 0.5, 9.0) == 0.0                  # ... and has until 11.5


def test_a_pause_for_the_clients_text_is_not_lateness():
    clock = ListenerClock()
    clock.sent(10.0, 0.5, 9.0)                     # played until 10.6
    # the next segment's text came at 12.0, after the player ran dry: a new start
    assert clock.sent(12.3, 0.5, 12.0) == 0.0
    assert clock.sent(12.5, 0.5, 12.0) == 0.0
    # but text that was there before the player ran dry is the server's to be on time for
    assert clock.sent(20.0, 0.5, 12.0) == pytest.approx(0.5)


def test_empty_chunks_change_nothing():
    clock = ListenerClock()
    assert clock.sent(10.0, 0.0, 9.0) == 0.0 and clock.drained_at is None
