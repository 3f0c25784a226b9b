"""orpheus_tts_client.AsyncClient against the fake server (each test runs its own loop)."""

import asyncio

import grpc
import pytest

from orpheus_tts_client import FLUSH, AsyncClient, AudioChunk, SegmentEnd, SegmentStart, TTSError

from .fake_server import CHUNKS_PER_SEGMENT, VOICES
from .test_sync_client import check_order


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 15))


def test_async_stream_from_an_async_generator_with_flush(fake):
    async def fragments():
        for f in ["Hel", "lo the", "re. How", " are"]:
            await asyncio.sleep(0)
            yield f
        yield FLUSH
        yield "Bye"

    async def main():
        async with AsyncClient(fake.target) as tts:
            return [ev async for ev in tts.stream(fragments(), voice="zoe")]

    events = run(main())
    check_order(events)
    assert [e.text for e in events if isinstance(e, SegmentStart)] == ["Hello there.", "How are",
                                                                       "Bye"]
    assert fake.servicer.calls[-1].kinds == ["config"] + ["text"] * 4 + ["flush", "text"]


def test_async_stream_from_a_sync_iterable(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            return [ev async for ev in tts.stream(["One. ", "Two.", FLUSH])]

    events = run(main())
    assert [e.text for e in events if isinstance(e, SegmentEnd)] == ["One.", "Two."]


def test_async_audio_for_a_fragment_arrives_before_the_next_is_sent(fake):
    """Text is written while responses are read: the session is truly interactive."""
    async def main():
        got_audio = asyncio.Event()

        async def fragments():
            yield "First sentence. "
            await asyncio.wait_for(got_audio.wait(), 5)
            yield "Second one."

        async with AsyncClient(fake.target) as tts:
            out = []
            async for ev in tts.stream(fragments()):
                if isinstance(ev, AudioChunk):
                    got_audio.set()
                out.append(ev)
            return out

    events = run(main())
    assert sum(isinstance(e, AudioChunk) for e in events) == 2 * CHUNKS_PER_SEGMENT


def test_async_synthesize_and_info_calls(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            res = await tts.synthesize("Hello there.", sample_rate=48000)
            return res, await tts.list_voices(), await tts.status(), await tts.health()

    res, voices, status, health = run(main())
    assert res.sample_rate == 48000 and res.summary.num_segments == 1
    assert res.num_samples == CHUNKS_PER_SEGMENT * 4096
    assert voices.names == list(VOICES)
    assert status.model == "fake-a" and health == "SERVING"


def test_async_errors_map_to_tts_error(fake):
    async def main():
        async with AsyncClient(fake.target) as tts:
            async def silent():
                # Sends nothing after the config: a text write racing the server's abort can
                # turn the status into INTERNAL in grpcio's asyncio stack (grpc/grpc#36066).
                await asyncio.Event().wait()
                yield "never"

            with pytest.raises(TTSError) as a:
                async for _ in tts.stream(silent(), voice="nobody"):
                    pass
            with pytest.raises(TTSError) as b:
                await tts.synthesize("Hi.", voice="nobody")
            with pytest.raises(TTSError) as c:
                await tts.synthesize("Hi.", sample_rate=12345)
            return a.value, b.value, c.value

    a, b, c = run(main())
    for e in (a, b, c):
        assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "known voices: tara" in a.details and "nobody" in b.details


def test_async_exception_in_text_source_is_reraised(fake):
    async def broken():
        yield "Hello there. "
        raise ValueError("bad fragment source")

    async def main():
        async with AsyncClient(fake.target) as tts:
            async for _ in tts.stream(broken()):
                pass

    with pytest.raises(ValueError, match="bad fragment source"):
        run(main())
