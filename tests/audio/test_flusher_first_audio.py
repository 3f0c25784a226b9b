"""An iteration hands a waiting listener's first audio to the sink before it decodes the
rest, and builds the decoder input of a call in one codec.latents call per window shape."""

from __future__ import annotations

import numpy as np

from orpheus_svc.audio.flusher import Flusher
from orpheus_svc.audio.settings import FlusherSettings
from orpheus_svc.core.playout import PlayoutSnapshot

from .conftest import random_frames
from .test_flusher import Collect, Ticking, check_accounting, frozen


class Counting(Ticking):
    """Ticking, and records the batch size of every latents call and when decodes ran."""

    def __init__(self, codec, seconds=0.0):
        super().__init__(codec, seconds)
        self.latent_batches: list[int] = []
        self.decodes = 0

    def latents(self, batch):
        self.latent_batches.append(len(batch))
        return super().latents(batch)

    def decode_latents(self, z, keep=None):
        self.decodes += 1
        return super().decode_latents(z, keep)


def test_first_audio_goes_to_the_sink_before_the_rest_is_decoded(tiny_codec):
    codec = Counting(tiny_codec)
    sink = Collect()
    decodes_at_sink = []

    def sink_call(events):
        decodes_at_sink.append(codec.decodes)
        sink(events)

    flusher = Flusher(codec, FlusherSettings(), sink_call, clock=frozen)
    steady = random_frames(40, seed=3)
    flusher.push(1, steady[:1], playout=PlayoutSnapshot(0.0))
    flusher.run_once()  # 1's first chunk
    flusher.push(1, steady[1:30], playout=PlayoutSnapshot(0.0))  # 1 has steady windows due
    flusher.push(2, random_frames(2, seed=4), playout=PlayoutSnapshot(0.0))  # 2 starts
    before = len(sink.calls)
    flusher.run_once()
    first, rest = sink.calls[before:]
    assert [e.gen_id for e in first] == [2] and first[0].sample_offset == 0
    assert {e.gen_id for e in rest} == {1}
    # the first call went out after 2's decode, before any of 1's
    assert decodes_at_sink[before] < decodes_at_sink[before + 1]
    flusher.push(1, steady[30:], final=True)
    flusher.push(2, np.zeros((0, 7), np.int64), final=True)
    while flusher.run_once() or flusher.backlog:
        pass
    check_accounting(sink.events(1), 40)
    check_accounting(sink.events(2), 2)


def test_an_iteration_with_only_steady_windows_makes_one_sink_call(tiny_codec):
    sink = Collect()
    flusher = Flusher(Counting(tiny_codec), FlusherSettings(), sink, clock=frozen)
    for gid in (1, 2):
        flusher.push(gid, random_frames(1, seed=gid), playout=PlayoutSnapshot(0.0))
    flusher.run_once()
    for gid in (1, 2):
        flusher.push(gid, random_frames(20, seed=10 + gid), playout=PlayoutSnapshot(0.0))
    before = len(sink.calls)
    flusher.run_once()
    assert len(sink.calls) == before + 1


def test_one_latents_call_per_window_shape_and_the_same_audio(tiny_codec):
    frames = {gid: random_frames(33, seed=20 + gid) for gid in range(1, 9)}

    def run(max_decode_frames):
        codec = Counting(tiny_codec)
        sink = Collect()
        flusher = Flusher(codec, FlusherSettings(max_decode_frames=max_decode_frames), sink,
                          clock=frozen)
        for gid, f in frames.items():
            flusher.push(gid, f[:gid], playout=PlayoutSnapshot(0.0))  # staggered starts
        flusher.run_once()
        for gid, f in frames.items():
            flusher.push(gid, f[gid:], final=True, playout=PlayoutSnapshot(0.0))
        while flusher.run_once() or flusher.backlog:
            pass
        return codec, sink

    batched, sink = run(1024)
    single, ref = run(1)  # one window per decode call: one latents call per window
    assert max(single.latent_batches) == 1
    assert max(batched.latent_batches) > 1
    assert len(batched.latent_batches) < len(single.latent_batches)
    for gid in frames:
        check_accounting(sink.events(gid), 33)
        np.testing.assert_allclose(sink.pcm(gid), ref.pcm(gid), atol=1e-5)
