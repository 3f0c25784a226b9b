"""The session API (send / flush / end / cancel, iterate events) of Client and AsyncClient,
against the fake server."""

import asyncio
import threading

import grpc
import pytest

from orpheus_tts_client import (
    AsyncClient, AsyncSession, AudioChunk, Client, SegmentEnd, SegmentStart, Session, Summary,
    TTSError,
)

from .test_sync_client import check_order


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 15))


def test_sync_session_send_flush_end_then_iterate(fake):
    with Client(fake.target) as tts, tts.session(voice="zoe") as s:
        assert isinstance(s, Session)
        s.send("Hel")
        s.send("lo the")
        s.send("re. How")
        s.send("")  # skipped, not sent
        s.send(" are")
        s.flush()
        s.send("Bye")
        s.end()
        s.end()  # idempotent
        events = list(s)
    check_order(events)
    assert [e.text for e in events if isinstance(e, SegmentStart)] == ["Hello there.", "How are",
                                                                       "Bye"]
    assert isinstance(events[-1], Summary)
    assert fake.servicer.calls[-1].kinds == ["config"] + ["text"] * 4 + ["flush", "text"]
    assert s.done


def test_sync_session_reads_while_another_thread_sends(fake):
    """Audio of the first sentence arrives before the second is sent (no half-close first)."""
    with Client(fake.target) as tts:
        s = tts.session()
        got_audio = threading.Event()

        def producer():
            s.send("First sentence. ")
            assert got_audio.wait(5)
            s.send("Second one.")
            s.end()

        t = threading.Thread(target=producer)
        t.start()
        texts = []
        for ev in s:
            if isinstance(ev, AudioChunk):
                got_audio.set()
            if isinstance(ev, SegmentEnd):
                texts.append(ev.text)
        t.join(5)
    assert texts == ["First sentence.", "Second one."]


def test_sync_session_cancel_ends_iteration_quietly_and_refuses_more_text(fake):
    with Client(fake.target) as tts:
        s = tts.session()
        s.send("First sentence. ")
        seen = []
        for ev in s:
            seen.append(ev)
            if isinstance(ev, AudioChunk):
                s.cancel()
        assert any(isinstance(e, AudioChunk) for e in seen)
        assert not any(isinstance(e, Summary) for e in seen)
        assert s.done
        with pytest.raises(TTSError) as err:
            s.send("more")
        assert err.value.code == grpc.StatusCode.CANCELLED


def test_sync_session_send_after_end_is_an_error(fake):
    with Client(fake.target) as tts, tts.session() as s:
        s.send("Hi.")
        s.end()
        with pytest.raises(RuntimeError, match="ended"):
            s.send("late")
        with pytest.raises(TypeError):
            s.send(b"bytes")  # type: ignore[arg-type]
        assert isinstance(list(s)[-1], Summary)


def test_sync_session_server_error_raises_tts_error(fake):
    # the fake refuses the voice on the config: send() raises the status if the call has
    # already ended by then, else reading does
    with Client(fake.target) as tts, tts.session(voice="nobody") as s:
        with pytest.raises(TTSError) as err:
            s.send("Hi.")
            s.end()
            list(s)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_async_session_send_flush_end_then_iterate(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            async with tts.session(voice="zoe") as s:
                assert isinstance(s, AsyncSession)
                for f in ["Hel", "lo the", "re. How", " are"]:
                    await s.send(f)
                await s.flush()
                await s.send("Bye")
                await s.end()
                await s.end()
                return [ev async for ev in s]

    events = run(main())
    check_order(events)
    assert [e.text for e in events if isinstance(e, SegmentStart)] == ["Hello there.", "How are",
                                                                       "Bye"]
    assert fake.servicer.calls[-1].kinds == ["config"] + ["text"] * 4 + ["flush", "text"]


def test_async_session_sender_and_reader_tasks_interleave(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            s = tts.session()
            got_audio = asyncio.Event()

            async def producer():
                await s.send("First sentence. ")
                await asyncio.wait_for(got_audio.wait(), 5)
                await s.send("Second one.")
                await s.end()

            task = asyncio.ensure_future(producer())
            texts = []
            async for ev in s:
                if isinstance(ev, AudioChunk):
                    got_audio.set()
                if isinstance(ev, SegmentEnd):
                    texts.append(ev.text)
            await task
            return texts

    assert run(main()) == ["First sentence.", "Second one."]


def test_async_session_cancel_ends_iteration_quietly(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            s = tts.session()
            await s.send("First sentence. ")
            seen = []
            async for ev in s:
                seen.append(ev)
                if isinstance(ev, AudioChunk):
                    s.cancel()
            with pytest.raises(TTSError) as err:
                await s.send("more")
            return seen, s.done, err.value.code

    seen, done, code = run(main())
    assert any(isinstance(e, AudioChunk) for e in seen)
    assert not any(isinstance(e, Summary) for e in seen)
    assert done and code == grpc.StatusCode.CANCELLED


def test_async_session_writes_racing_a_refusal_still_report_the_servers_status(fake):
    # grpc.aio sets INTERNAL "Internal error from Core" on a call whose write fails because
    # the server just ended it, over the server's own status; the session reports the
    # server's (_StatusWatch). Each session writes text at once, racing the refusal.
    async def one() -> grpc.StatusCode:
        async with AsyncClient(fake.target, retries=0) as tts:
            s = tts.session(voice="nobody")
            try:
                for _ in range(20):
                    await s.send("Hello there. ")
                async for _ in s:
                    pass
            except TTSError as e:
                return e.code
        return grpc.StatusCode.OK

    async def main():
        return [await one() for _ in range(40)]

    assert set(run(main())) == {grpc.StatusCode.INVALID_ARGUMENT}


def test_async_session_server_error_raises_tts_error(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            async with tts.session(voice="nobody") as s:
                return [ev async for ev in s]

    with pytest.raises(TTSError) as err:
        run(main())
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_flush_ids_reach_the_server(fake):
    with Client(fake.target) as tts, tts.session() as s:
        s.send("Hi there")
        s.flush("f-1")
        s.end()
        list(s)

    async def main():
        async with AsyncClient(fake.target) as tts, tts.session() as s:
            await s.send("Hi there")
            await s.flush("f-2")
            await s.end()
            return [ev async for ev in s]

    run(main())
    flushes = [[v for k, v, _ in c.items if k == "flush"] for c in fake.servicer.calls]
    assert flushes == [["f-1"], ["f-2"]]
