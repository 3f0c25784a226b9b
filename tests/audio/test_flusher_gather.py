"""Gathering (FlusherSettings.gather_s): chunks no listener needs yet wait for the next
gathering iteration and share its SNAC calls; first audio and listeners about to run dry
do not wait; a started flusher wakes for what it holds by itself."""

from __future__ import annotations

import threading
import time

import numpy as np

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.playout import PlayoutSnapshot

from .conftest import random_frames
from .test_flusher import Collect, check_accounting
from .test_flusher_first_audio import Counting

GATHER = 0.02


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _flusher(codec, clock, gather_s=GATHER):
    sink = Collect()
    return Flusher(codec, FlusherSettings(gather_s=gather_s), sink, clock=clock), sink


def _second_chunks(codec, gather_s):
    """Eight listeners each past its first chunk, whose second chunks become due in
    different engine steps (6 ms apart), each listener with 100 ms to play first: enough
    not to be urgent, little enough that the chunk target is met."""
    clock = Clock()
    flusher, sink = _flusher(codec, clock, gather_s)
    frames = {gid: random_frames(3, seed=gid) for gid in range(1, 9)}
    for gid in frames:
        flusher.push(gid, frames[gid][:1], playout=PlayoutSnapshot(clock.now))
    flusher.run_once()  # every first chunk: a listener waits for each
    assert {e.gen_id for e in sink.events()} == set(frames)
    codec.decodes = 0
    for gid in frames:  # one stream's second chunk becomes due per step
        clock.now += 0.006
        flusher.push(gid, frames[gid][1:], playout=PlayoutSnapshot(clock.now + 0.08))
        flusher.run_once()
    return flusher, sink, clock, frames


def test_chunks_nobody_needs_yet_wait_for_the_gathering_iteration_and_share_calls(tiny_codec):
    codec = Counting(tiny_codec)
    flusher, sink, clock, frames = _second_chunks(codec, GATHER)
    assert codec.decodes <= 2  # held: not one call per step (two gathering iterations)
    clock.now += GATHER
    flusher.run_once()
    # every second chunk is out, and windows of one shape went in one call
    assert all(sum(e.num_samples for e in sink.events(g)) == 3 * 2048 - 2560 for g in frames)
    assert codec.decodes <= 3
    for gid in frames:
        flusher.push(gid, np.zeros((0, 7), np.int64), final=True)
    clock.now += GATHER
    flusher.run_once()
    for gid in frames:
        check_accounting(sink.events(gid), 3)


def test_without_gathering_each_step_decodes_its_own_chunk(tiny_codec):
    codec = Counting(tiny_codec)
    _second_chunks(codec, 0.0)
    assert codec.decodes == 8


def test_first_audio_and_a_listener_about_to_run_dry_do_not_wait(tiny_codec):
    codec = Counting(tiny_codec)
    clock = Clock()
    flusher, sink = _flusher(codec, clock)
    flusher.push(1, random_frames(1, seed=1), playout=PlayoutSnapshot(clock.now))
    flusher.run_once()  # a gathering iteration (the first): 1's first chunk
    clock.now += 0.001
    # 2: a listener waits for its first audio, between two gathering iterations
    flusher.push(2, random_frames(1, seed=2), playout=PlayoutSnapshot(clock.now))
    flusher.run_once()
    assert [e.gen_id for e in sink.events(2)] == [2]
    # 1: its listener started 0.02 s ago and got 512 samples (21 ms): nearly dry now, so its
    # next chunk goes at once, before the next gathering iteration
    clock.now += 0.005
    flusher.push(1, random_frames(4, seed=3)[1:])
    flusher.run_once()
    assert len(sink.events(1)) == 2


def test_a_started_flusher_sends_what_it_holds_without_another_push(tiny_codec):
    got = threading.Event()
    events = []

    def sink(batch):
        events.extend(batch)
        if sum(e.num_samples for e in events if e.gen_id == 1) == 3 * 2048 - 2560:
            got.set()

    flusher = Flusher(tiny_codec, FlusherSettings(gather_s=0.05), sink)
    flusher.start()
    try:
        frames = random_frames(3, seed=1)
        flusher.push(1, frames[:1], playout=PlayoutSnapshot(time.monotonic()))
        time.sleep(0.01)
        # held (100 ms to play first, more than low water + gather_s) and due by its target
        flusher.push(1, frames[1:], playout=PlayoutSnapshot(time.monotonic() + 0.08))
        assert got.wait(5.0), "the held chunk never went out"
    finally:
        flusher.stop(timeout=5)
