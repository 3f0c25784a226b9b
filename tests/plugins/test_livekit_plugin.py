"""OrpheusTTS with the real livekit-agents package against a live orpheus-svc server."""

import asyncio

import pytest

from .conftest import require

require("livekit.agents")

from livekit.agents import APIConnectOptions, APIError  # noqa: E402
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT, TimedString  # noqa: E402
from livekit.agents.utils import is_given  # noqa: E402

from orpheus_tts_client import AsyncClient, Sampling  # noqa: E402
from orpheus_tts_client.livekit import OrpheusTTS  # noqa: E402

RATE = 16000
NO_RETRY = APIConnectOptions(max_retry=0)


async def wait_idle(addr):
    async with AsyncClient(addr) as client:
        while True:
            st = await client.status()
            if st.active_generations == 0 and st.waiting_generations == 0:
                return st
            await asyncio.sleep(0.02)


def test_declares_streaming_and_the_models_markup(server_addr):
    t = OrpheusTTS(target=server_addr)
    assert t.capabilities.streaming and t.capabilities.aligned_transcript
    assert t.sample_rate == 24000 and t.num_channels == 1
    instructions = t.markup.llm_instructions()
    assert "<laugh>" in instructions and "<sigh>" in instructions
    assert t.markup.convert("Ha <laugh> ok") == "Ha <laugh> ok"


def test_synthesize_returns_the_whole_text_as_audio(server_addr):
    async def main():
        async with OrpheusTTS(target=server_addr, sample_rate=RATE,
                              sampling=Sampling(seed=2)) as t:
            return await t.synthesize("Hello there. How are you?").collect()

    frame = asyncio.run(main())
    assert frame.sample_rate == RATE and frame.num_channels == 1
    assert frame.samples_per_channel > 0


def test_stream_speaks_pushed_fragments_as_one_livekit_segment(server_addr):
    """livekit-agents 1.8 uses one SynthesizeStream per segment (text pushed after a flush is
    dropped by the framework): every server segment of the turn, here a sentence end and the
    flush, goes into that one LiveKit segment, whose last event is final."""
    async def main():
        async with OrpheusTTS(target=server_addr, sample_rate=RATE) as t:
            stream = t.stream(conn_options=NO_RETRY)
            for f in ["Hel", "lo there. How", " are", " you?"]:
                stream.push_text(f)
            stream.flush()
            stream.end_input()
            events = [ev async for ev in stream]
            await stream.aclose()
            return events

    events = asyncio.run(main())
    assert events and len({ev.segment_id for ev in events}) == 1
    assert {ev.frame.sample_rate for ev in events} == {RATE}
    assert sum(ev.frame.samples_per_channel for ev in events) > 0
    assert events[-1].is_final and not any(ev.is_final for ev in events[:-1])


def spoken(text, **options):
    """(the stream's events, every TimedString on its frames, in order) for `text` pushed
    in fragments of a few characters, flushed and ended."""
    async def main():
        async with OrpheusTTS(sample_rate=RATE, **options) as t:
            stream = t.stream(conn_options=NO_RETRY)
            for i in range(0, len(text), 7):
                stream.push_text(text[i:i + 7])
            stream.flush()
            stream.end_input()
            events = [ev async for ev in stream]
            await stream.aclose()
            return events

    events = asyncio.run(main())
    timed = [t for ev in events for t in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    return events, timed


TEXT = "Hello there, friend. How are you doing today?"


def test_the_stream_attaches_each_word_as_livekits_timed_string(server_addr):
    events, timed = spoken(TEXT, target=server_addr, sampling=Sampling(seed=4))
    duration = sum(ev.frame.duration for ev in events)
    assert timed and all(type(t) is TimedString for t in timed)
    assert "".join(timed).split() == TEXT.split()  # one per word, in order, each spaced
    starts = [t.start_time for t in timed]
    assert starts == sorted(starts) and 0 <= starts[0] and starts[-1] < duration
    assert all(is_given(t.end_time) and t.start_time <= t.end_time for t in timed)


def test_without_word_timings_each_segment_is_one_timed_string_at_its_start(server_addr):
    events, timed = spoken(TEXT, target=server_addr, sampling=Sampling(seed=4),
                           word_timestamps=False)
    assert [str(t) for t in timed] == ["Hello there, friend. ", "How are you doing today? "]
    assert timed[0].start_time == 0.0 and 0 < timed[1].start_time
    assert timed[1].start_time < sum(ev.frame.duration for ev in events)


def test_word_times_are_the_servers_in_seconds_of_the_segment():
    """Against the in-process fake, whose word times are exact: a word's TimedString
    starts where the server says its audio does."""
    from tests.clients.fake_server import FakeServer, chunk_samples

    fake = FakeServer("livekit-words", word_timings=True, chunks_per_word=2).start()
    try:
        _, timed = spoken("One two. Three four.", target=fake.target)
    finally:
        fake.stop()
    word_s = 2 * chunk_samples(RATE) / RATE  # two chunks a word
    assert [str(t) for t in timed] == ["One ", "two. ", "Three ", "four. "]
    assert [t.start_time for t in timed] == pytest.approx([i * word_s for i in range(4)])
    assert timed[-1].end_time == pytest.approx(4 * word_s)


def test_closing_a_stream_mid_turn_frees_the_servers_slots(server_addr):
    seen = {}

    async def main():
        async with OrpheusTTS(target=server_addr) as t:
            stream = t.stream(conn_options=NO_RETRY)
            for _ in range(8):
                stream.push_text("This is one of many sentences that keep the model busy. ")
            async for ev in stream:
                if ev.frame.samples_per_channel:
                    break
            async with AsyncClient(server_addr) as client:
                seen["busy"] = await client.status()
            await stream.aclose()
            seen["idle"] = await wait_idle(server_addr)

    asyncio.run(main())
    assert seen["busy"].active_generations + seen["busy"].waiting_generations >= 1
    idle = seen["idle"]
    assert idle.active_generations == 0 and idle.free_slots == idle.total_slots


def test_a_server_error_raises_an_api_error(server_addr):
    async def main():
        async with OrpheusTTS(target=server_addr, voice="nobody") as t:
            stream = t.stream(conn_options=NO_RETRY)
            stream.push_text("Hello there.")
            stream.end_input()
            return [ev async for ev in stream]

    with pytest.raises(APIError, match="orpheus-svc"):
        asyncio.run(main())


@pytest.fixture(autouse=True)
def _server_is_idle_after_each_test(server_addr):
    yield
    st = asyncio.run(wait_idle(server_addr))
    assert st.free_slots == st.total_slots


def test_the_tts_request_span_is_the_parent_of_the_call():
    """livekit-agents runs a stream inside its `tts_request` span (made current): the call's
    traceparent names it, so orpheus-svc's span for the call continues the agent's trace.
    Against the in-process fake server, which records the call's metadata."""
    from livekit.agents.telemetry import set_tracer_provider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.clients.fake_server import FakeServer, chunk_samples

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_tracer_provider(provider)
    fake = FakeServer("livekit-traced").start()

    async def main():
        async with OrpheusTTS(target=fake.target, sample_rate=RATE) as t:
            stream = t.stream(conn_options=NO_RETRY)
            stream.push_text("Hello there.")
            stream.end_input()
            return [ev async for ev in stream]
    try:
        assert asyncio.run(main())
        (call,) = [c for c in fake.servicer.calls if c.method == "StreamingSynthesize"]
    finally:
        fake.stop()
    provider.force_flush()
    _, trace_id, span_id, _ = call.metadata["traceparent"].split("-")
    named = [s for s in exporter.get_finished_spans()
             if f"{s.context.trace_id:032x}" == trace_id and f"{s.context.span_id:016x}" == span_id]
    # older livekit-agents streamed in its `tts_request` span; 1.8.9 runs each attempt in a
    # `tts_request_run` span under it (livekit/agents/tts/tts.py `_tts_attempt_span_name`)
    assert named and named[0].name in ("tts_request", "tts_request_run"), \
        [s.name for s in exporter.get_finished_spans()]
