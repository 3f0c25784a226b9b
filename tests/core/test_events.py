"""The plain data that leaves the engine (core/events.py): a Rejected's code, an audio
event's length, and the per-step batch handed to the sink in one call."""

import numpy as np
import pytest

from orpheus_svc.core.events import AudioEvent, EventBatch, Rejected
from orpheus_svc.core.status import Status


def test_a_rejection_is_resource_exhausted_unless_told_and_a_name_becomes_its_status():
    assert Rejected(1, "queue full").code is Status.RESOURCE_EXHAUSTED
    named = Rejected(2, "bad", code="INVALID_ARGUMENT")
    assert named.code is Status.INVALID_ARGUMENT and type(named.code) is Status
    with pytest.raises(ValueError):
        Rejected(3, "bad", code="NO_SUCH_CODE")


def test_an_audio_event_counts_its_samples():
    assert AudioEvent(1, np.zeros(2048, np.float32), 0).num_samples == 2048
    assert AudioEvent(1, np.zeros(0, np.float32), 2048, final=True).num_samples == 0
    assert type(AudioEvent(1, np.zeros(3, np.float32), 0).num_samples) is int


def test_a_batch_hands_its_events_over_in_one_call_and_starts_empty_again():
    calls = []
    batch = EventBatch(calls.append)
    batch.flush()
    assert calls == []  # nothing collected: the sink is not called
    first, second = Rejected(1, "a"), Rejected(2, "b")
    batch.add(first)
    batch.add(second)
    batch.flush()
    assert calls == [[first, second]]
    assert batch.events == []
    batch.flush()
    assert calls == [[first, second]]
    third = Rejected(3, "c")
    batch.add(third)
    batch.flush()
    assert calls == [[first, second], [third]]
