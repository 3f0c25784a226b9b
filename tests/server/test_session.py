"""StreamSession against a fake engine that answers instantly: ordering and progress."""

import asyncio
import itertools

import numpy as np
import pytest

from orpheus_svc.config import TextConfig
from orpheus_svc.core.events import AudioEvent, Finished
from orpheus_svc.core.generation import GenerationRequest, SamplingParams
from orpheus_svc.server.session import (
    AudioOut, FlushIn, SegmentEnded, SessionOptions, StreamSession, Summary, TextIn,
)


class FakeRuntime:
    """Stands in for Runtime: every submitted generation finishes at once with `frames`
    frames, delivered in reverse submission order when `reverse` (later segments first)."""

    def __init__(self, frames=2, reverse=False):
        self.frames, self.reverse = frames, reverse
        self._ids = itertools.count(1)
        self.handlers, self.submitted, self.cancelled = {}, [], []
        self.router, self.engine = self, self
        self._pending = []

    # router
    def register(self, gen_id, handler, loop=None):
        self.handlers[gen_id] = handler

    def unregister(self, gen_id):
        self.handlers.pop(gen_id, None)

    # core
    def new_id(self):
        return next(self._ids)

    def submit(self, req, gen_id):
        self.submitted.append((gen_id, req))
        self._pending.append(gen_id)
        asyncio.get_running_loop().call_soon(self._finish_pending)

    def cancel(self, gen_id):
        self.cancelled.append(gen_id)

    def _finish_pending(self):
        batch, self._pending = self._pending, []
        for gid in (reversed(batch) if self.reverse else batch):
            h = self.handlers[gid]
            h(AudioEvent(gid, np.zeros(self.frames * 2048, np.float32), 0, final=True))
            h(Finished(gid, "length", 10, 7 * self.frames, self.frames))

    def request(self, session_id, segment_index, voice, text, sampling=None):
        return GenerationRequest(session_id, segment_index, (1, 2, 3), 70)


OPTS = SessionOptions("tara", "pcm16", 24000, SamplingParams())


async def _run(runtime, inputs, **text):
    async def source():
        for i in inputs:
            yield i

    session = StreamSession(runtime, OPTS, TextConfig(**text))
    return [out async for out in session.run(source())]


@pytest.mark.parametrize("in_flight", [1, 2, 3])
@pytest.mark.parametrize("reverse", [False, True])
def test_every_segment_is_submitted_and_delivered_in_order(in_flight, reverse):
    rt = FakeRuntime(reverse=reverse)
    texts = [TextIn("One. Two. Three. Four. Five.")]
    outs = asyncio.run(asyncio.wait_for(_run(rt, texts, max_segments_in_flight=in_flight), 30))
    ends = [o for o in outs if isinstance(o, SegmentEnded)]
    assert [e.text for e in ends] == ["One.", "Two.", "Three.", "Four.", "Five."]
    assert isinstance(outs[-1], Summary) and outs[-1].num_segments == 5
    audio = [o for o in outs if isinstance(o, AudioOut)]
    assert [a.sequence_number for a in audio] == list(range(len(audio)))
    assert sum(a.num_samples for a in audio) == 5 * 2 * 2048


def test_flush_and_segments_in_flight_bound():
    rt = FakeRuntime()
    outs = asyncio.run(asyncio.wait_for(
        _run(rt, [TextIn("no end"), FlushIn(), TextIn(" more")], max_segments_in_flight=1), 30))
    assert [o.text for o in outs if isinstance(o, SegmentEnded)] == ["no end", "more"]
    assert not rt.cancelled and not rt.handlers  # nothing left registered
