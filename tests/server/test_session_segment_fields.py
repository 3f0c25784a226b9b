"""StreamSession: segment cause, text range and Flush ids (fake engine that answers at once)."""

import asyncio

from orpheus_svc.config import TextConfig
from orpheus_svc.server.session import (
    FlushIn, SegmentEnded, SegmentStarted, StreamSession, TextIn,
)

from .test_session import OPTS, FakeRuntime


async def _outs(runtime, source):
    session = StreamSession(runtime, OPTS, TextConfig())
    return [out async for out in session.run(source)]


def test_flush_ids_causes_and_ranges_reach_the_segment_events():
    async def source():
        for item in [TextIn("One. "), FlushIn("a"), TextIn("Two"), FlushIn("b"), TextIn("Three")]:
            yield item

    outs = asyncio.run(asyncio.wait_for(_outs(FakeRuntime(), source()), 30))
    ends = [o for o in outs if isinstance(o, SegmentEnded)]
    starts = [o for o in outs if isinstance(o, SegmentStarted)]
    # "One." was cut at its sentence end; the flush right after found nothing pending, so its
    # id went to "One." (not delivered yet)
    assert [(e.text, e.cut.cause, e.flush_id, e.cut.start, e.cut.end) for e in ends] == [
        ("One.", "sentence", "a", 0, 4), ("Two", "flush", "b", 5, 8),
        ("Three", "end_of_input", "", 8, 13)]
    assert [(s.flush_id, s.cut) for s in starts] == [(e.flush_id, e.cut) for e in ends]


def test_an_empty_flush_after_its_segment_was_delivered_is_not_echoed():
    rt = FakeRuntime()

    async def source():
        yield TextIn("One. ")
        # wait until "One." has been delivered (its generation unregistered)
        while not rt.submitted or rt.handlers:
            await asyncio.sleep(0)
        yield FlushIn("late")
        yield TextIn("Two")

    outs = asyncio.run(asyncio.wait_for(_outs(rt, source()), 30))
    ends = [o for o in outs if isinstance(o, SegmentEnded)]
    assert [(e.text, e.flush_id) for e in ends] == [("One.", ""), ("Two", "")]
