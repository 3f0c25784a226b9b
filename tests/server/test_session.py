"""StreamSession against a fake engine that answers instantly: ordering and progress."""

import asyncio
import itertools

import numpy as np
import pytest

from orpheus_svc.config import TextConfig
from orpheus_svc.core.errors import SessionError
from orpheus_svc.core.events import AudioEvent, Finish
from orpheus_svc.core.request import GenerationRequest, SamplingParams
from orpheus_svc.engine.handle import GenerationHandle
from orpheus_svc.server.session import (
    AudioOut, FlushIn, SegmentEnded, StreamSession, Summary, TextIn,
)
from orpheus_svc.server.settings import SessionSettings


class FakeRuntime:
    """Stands in for Runtime (its router and engine; open() makes a real handle): every
    submitted generation finishes at once with `frames` frames, delivered in reverse
    submission order when `reverse` (later segments first); `ends` maps a segment index to
    a Finish reason other than "length" (its one final event then has no audio)."""

    def __init__(self, frames=2, reverse=False, ends=None, hold=False):
        self.frames, self.reverse, self.ends, self.hold = frames, reverse, ends or {}, hold
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
        if self.hold:  # never answers (a slow engine)
            return
        self._pending.append(gen_id)
        asyncio.get_running_loop().call_soon(self._finish_pending)

    def cancel(self, gen_id):
        self.cancelled.append(gen_id)

    def _finish_pending(self):
        batch, self._pending = self._pending, []
        for gid in (reversed(batch) if self.reverse else batch):
            h = self.handlers.get(gid)
            if h is None:
                continue
            index = dict(self.submitted)[gid].segment_index
            reason = self.ends.get(index, "length")
            if reason != "length":
                h(AudioEvent(gid, np.zeros(0, np.float32), 0, final=True,
                             finish=Finish(reason, 10, 7, 1, "boom" if reason == "error" else None)))
                continue
            h(AudioEvent(gid, np.zeros(self.frames * 2048, np.float32), 0, final=True,
                         finish=Finish("length", 10, 7 * self.frames, self.frames)))
            h(AudioEvent(gid, np.zeros(2048, np.float32), 0))  # a stray: nothing after the end

    def request(self, session_id, segment_index, voice, text, sampling=None, adapter=-1,
                reference=None):
        return GenerationRequest(session_id, segment_index, (1, 2, 3), 70)

    def lease_voice(self, voice):  # base voices only: no LoRA adapter to hold
        return None

    def open(self, request, on_event=None, loop=None):
        return GenerationHandle(self, self, request, on_event, loop)


OPTS = SessionSettings("tara", "pcm16", 24000, SamplingParams())


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


def test_tokens_come_from_the_finish_on_each_final_event():
    rt = FakeRuntime(frames=3)
    outs = asyncio.run(asyncio.wait_for(_run(rt, [TextIn("One. Two.")]), 30))
    ends = [o for o in outs if isinstance(o, SegmentEnded)]
    assert [(e.num_tokens, e.finish_reason, e.num_samples) for e in ends] == [(21, "length", 3 * 2048)] * 2
    assert outs[-1].num_tokens == 42


@pytest.mark.parametrize("reason, code", [("error", "INTERNAL"), ("cancelled", "UNAVAILABLE")])
def test_a_generation_that_ends_without_audio_fails_the_session(reason, code):
    rt = FakeRuntime(ends={1: reason})
    with pytest.raises(SessionError) as err:
        asyncio.run(asyncio.wait_for(_run(rt, [TextIn("One. Two. Three.")],
                                          max_segments_in_flight=3), 30))
    assert err.value.code == code and "segment 1" in err.value.message
    assert not rt.handlers  # every handle closed
    assert rt.cancelled == []  # the others had ended: nothing to cancel


def test_closing_the_session_early_cancels_the_generations_not_ended():
    rt = FakeRuntime(hold=True)

    async def main():
        async def source():
            yield TextIn("One. Two. Three.")
            await asyncio.sleep(3600)

        session = StreamSession(rt, OPTS, TextConfig(max_segments_in_flight=2))
        outputs = session.run(source())
        task = asyncio.ensure_future(outputs.__anext__())
        while len(rt.submitted) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await outputs.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert sorted(rt.cancelled) == sorted(g for g, _ in rt.submitted) and len(rt.cancelled) == 2
    assert not rt.handlers
