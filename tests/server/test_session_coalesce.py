"""Fewer, larger audio messages after the first (issue 16): a segment's first audio goes
alone; what queued behind it while the writes were in flight goes out as one AudioOut, up to
MAX_CHUNK_SAMPLES, with the same samples, offsets and bytes."""

import asyncio

import numpy as np
import pytest

from orpheus_svc.audio.pcm import Encoder
from orpheus_svc.config import TextConfig
from orpheus_svc.core.events import AudioEvent, Finish
from orpheus_svc.core.request import SamplingParams
from orpheus_svc.server.session import (
    MAX_CHUNK_SAMPLES, AudioOut, SegmentEnded, SegmentStarted, StreamSession, TextIn,
)
from orpheus_svc.server.settings import SessionSettings

from .test_session import FakeRuntime


class BurstRuntime(FakeRuntime):
    """Each generation's audio arrives as `sizes` chunks; `bursts` of them are delivered in
    one go (the flusher emitting several windows while the loop was busy), a loop turn apart."""

    def __init__(self, sizes, burst):
        super().__init__()
        self.sizes, self.burst = sizes, burst
        self.pcm = {}

    def _finish_pending(self):
        batch, self._pending = self._pending, []
        for gid in batch:
            rng = np.random.default_rng(gid)
            pcm = rng.uniform(-1, 1, sum(self.sizes)).astype(np.float32)
            self.pcm[gid] = pcm
            events, at = [], 0
            for k, n in enumerate(self.sizes):
                last = k == len(self.sizes) - 1
                events.append(AudioEvent(gid, pcm[at:at + n], at, final=last,
                                         finish=Finish("length", 3, 7, 1) if last else None))
                at += n
            asyncio.get_running_loop().create_task(self._deliver(gid, events))

    async def _deliver(self, gid, events):
        for k in range(0, len(events), self.burst):
            for ev in events[k:k + self.burst]:
                self.handlers[gid](ev)
            await asyncio.sleep(0)


def _session(rt, encoding="pcm16", rate=24000):
    async def source():
        yield TextIn("Just one sentence here.")

    async def run():
        session = StreamSession(rt, SessionSettings("tara", encoding, rate, SamplingParams()),
                                TextConfig())
        return [o async for o in session.run(source())]

    return asyncio.run(asyncio.wait_for(run(), 30))


SIZES = [512, 3072, 4096, 8192, 16384, 5000]


def test_chunks_queued_together_go_out_as_one_message_after_the_first():
    rt = BurstRuntime(SIZES, burst=len(SIZES))
    outs = _session(rt)
    audio = [o for o in outs if isinstance(o, AudioOut)]
    assert [a.num_samples for a in audio] == [512, sum(SIZES) - 512]
    assert isinstance(outs[0], SegmentStarted) and isinstance(outs[3], SegmentEnded)
    assert [a.sequence_number for a in audio] == [0, 1]
    assert [a.sample_offset for a in audio] == [0, 512]
    pcm = rt.pcm[1]
    assert b"".join(a.audio for a in audio) == Encoder("pcm16").encode(pcm)[0]


def test_chunks_that_arrive_one_at_a_time_are_not_held_back():
    rt = BurstRuntime(SIZES, burst=1)
    audio = [o for o in _session(rt) if isinstance(o, AudioOut)]
    assert [a.num_samples for a in audio] == SIZES


def test_a_merged_message_stays_within_the_cap_and_the_bytes_are_the_same():
    sizes = [512] + [20000] * 7 + [3000]
    rt = BurstRuntime(sizes, burst=len(sizes))
    audio = [o for o in _session(rt, "mulaw", 8000) if isinstance(o, AudioOut)]
    # the resampler holds the first 512 samples back (no audio out yet): the first audio
    # out is the next chunk, alone
    assert audio[0].num_samples < (512 + 20000) // 3 + 1
    assert all(a.num_samples <= MAX_CHUNK_SAMPLES // 3 for a in audio)
    assert len(audio) < len(sizes)
    offsets = [a.sample_offset for a in audio]
    assert offsets == [sum(a.num_samples for a in audio[:i]) for i in range(len(audio))]
    # the same bytes as one pass of the encoder over the whole utterance: G.711 is per sample
    # and the resampler streams, so chunking changes nothing
    whole = Encoder("mulaw", 8000)
    assert b"".join(a.audio for a in audio) == whole.encode(rt.pcm[1], last=True)[0]


@pytest.mark.parametrize("encoding", ["ogg_opus", "wav"])
def test_compressed_and_wav_streams_stay_whole(encoding):
    rt = BurstRuntime(SIZES, burst=3)
    outs = _session(rt, encoding)
    audio = [o for o in outs if isinstance(o, AudioOut)]
    assert sum(a.num_samples for a in audio) == sum(SIZES)
    assert [a.sequence_number for a in audio] == list(range(len(audio)))
