"""OrpheusTTSService in a real Pipecat pipeline against a live orpheus-svc server (and the
in-process fake server where a test needs exact or missing word times)."""

import asyncio
import warnings

import pytest

from .conftest import require

require("pipecat")

from pipecat.frames.frames import (  # noqa: E402
    EndFrame, ErrorFrame, InterruptionFrame, LLMFullResponseEndFrame, LLMFullResponseStartFrame,
    LLMTextFrame, TTSAudioRawFrame, TTSStartedFrame, TTSStoppedFrame, TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.aggregators.llm_response_universal import (  # noqa: E402
    LLMContextAggregatorPair,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.transports.base_output import BaseOutputTransport  # noqa: E402
from pipecat.transports.base_transport import TransportParams  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from orpheus_tts_client import (  # noqa: E402
    AsyncClient, Sampling, SegmentEnd, SegmentStart, WordTimings,
)
from orpheus_tts_client.pipecat import OrpheusTTSService  # noqa: E402

from tests.clients.fake_server import FakeServer  # noqa: E402

RATE = 16000


class Collector(FrameProcessor):
    """Records every frame that passes, in order, with its direction."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[object, FrameDirection]] = []
        self.first_audio = asyncio.Event()

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        self.frames.append((frame, direction))
        if isinstance(frame, TTSAudioRawFrame):
            self.first_audio.set()
        await self.push_frame(frame, direction)

    def of(self, cls, direction=FrameDirection.DOWNSTREAM):
        return [f for f, d in self.frames if isinstance(f, cls) and d == direction]


def turn(*fragments):
    return [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in fragments],
            LLMFullResponseEndFrame()]


async def run_pipeline(tts, frames, during=None, **worker_options):
    """Runs `frames` through before -> tts -> after the way Pipecat's own source says to
    (PipelineWorker, WorkerRunner.add_workers, then run), and fails on any Pipecat
    deprecation warning raised meanwhile (PipelineTask, PipelineRunner and
    WorkerRunner.run(worker) are deprecated since 1.3 and go in 2.0)."""
    before, after = Collector(), Collector()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        worker = PipelineWorker(Pipeline([before, tts, after]),
                                params=PipelineParams(audio_out_sample_rate=RATE),
                                **worker_options)
        await worker.queue_frames(frames)
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        run = asyncio.ensure_future(runner.run())
        if during is not None:
            await during(worker, before, after)
        await asyncio.wait_for(run, 300)
    deprecated = [str(w.message) for w in caught if "is deprecated since" in str(w.message)]
    assert deprecated == []
    return before, after


async def wait_idle(addr):
    """GetStatus until the server has no active or waiting generations; returns the status."""
    async with AsyncClient(addr) as client:
        while True:
            st = await client.status()
            if st.active_generations == 0 and st.waiting_generations == 0:
                return st
            await asyncio.sleep(0.02)


def test_llm_text_frames_become_audio_at_the_pipeline_rate(server_addr):
    # a long stop_frame_timeout_s: a loaded CPU demo server may pause longer than Pipecat's
    # default between chunks, and this test checks the frames, not the pace
    tts = OrpheusTTSService(target=server_addr, voice="tara", sampling=Sampling(seed=3),
                            stop_frame_timeout_s=120)

    async def main():
        _, after = await run_pipeline(tts, turn("Hel", "lo there. How", " are you?")
                                      + [EndFrame()])
        return after

    after = asyncio.run(main())
    kinds = [type(f).__name__ for f, d in after.frames if d == FrameDirection.DOWNSTREAM]
    audio = after.of(TTSAudioRawFrame)
    assert audio, kinds
    assert {a.sample_rate for a in audio} == {RATE} and {a.num_channels for a in audio} == {1}
    assert sum(len(a.audio) for a in audio) % 2 == 0 and sum(len(a.audio) for a in audio) > 0
    first_audio = kinds.index("TTSAudioRawFrame")
    assert "TTSStartedFrame" in kinds[:first_audio]
    assert "TTSStoppedFrame" in kinds[first_audio:]
    assert len(after.of(TTSStartedFrame)) == 1 and len(after.of(TTSStoppedFrame)) == 1
    spoken = " ".join(t.text for t in after.of(TTSTextFrame))
    assert "Hello there." in spoken and "How are you?" in spoken
    assert not after.of(ErrorFrame, FrameDirection.UPSTREAM)


def test_interruption_mid_turn_cancels_the_call_and_frees_the_slots(server_addr):
    tts = OrpheusTTSService(target=server_addr, voice="tara", stop_frame_timeout_s=120)
    long_text = ["This is the first of many sentences that keep the model busy. "] * 8
    seen = {}

    async def interrupt(worker, before, after):
        await asyncio.wait_for(after.first_audio.wait(), 120)
        async with AsyncClient(server_addr) as client:
            seen["busy"] = await client.status()
        await worker.queue_frame(InterruptionFrame())
        # the service cancels the call when it handles the interruption; wait for the
        # server to have let go of every generation, then end the pipeline
        while tts._sessions:
            await asyncio.sleep(0.01)
        seen["idle"] = await wait_idle(server_addr)
        seen["audio_at_idle"] = len(after.of(TTSAudioRawFrame))
        await worker.queue_frame(EndFrame())

    async def main():
        # the turn never ends by itself: only the interruption stops it
        return await run_pipeline(tts, [LLMFullResponseStartFrame(),
                                        *[LLMTextFrame(t) for t in long_text]], interrupt)

    _, after = asyncio.run(main())
    assert seen["busy"].active_generations + seen["busy"].waiting_generations >= 1
    idle = seen["idle"]
    assert idle.active_generations == 0 and idle.waiting_generations == 0
    assert idle.free_slots == idle.total_slots
    # no audio of the cancelled turn after the server went idle, and no error frames
    assert len(after.of(TTSAudioRawFrame)) == seen["audio_at_idle"]
    assert not after.of(ErrorFrame, FrameDirection.UPSTREAM)


def test_a_server_error_becomes_an_error_frame(server_addr):
    tts = OrpheusTTSService(target=server_addr, voice="nobody")

    async def main():
        return await run_pipeline(tts, turn("Hello there.") + [EndFrame()])

    before, after = asyncio.run(main())
    errors = before.of(ErrorFrame, FrameDirection.UPSTREAM)
    # The server refuses the voice with INVALID_ARGUMENT. grpc.aio reports a write that races
    # with that refusal as INTERNAL ("Internal error from Core") and loses the server's
    # status (docs/clients.md), so the code is not asserted here; the frame must name us.
    assert errors and errors[0].error.startswith("orpheus-svc: ")
    assert not after.of(TTSAudioRawFrame)


@pytest.fixture(autouse=True)
def _server_is_idle_after_each_test(server_addr):
    yield
    st = asyncio.run(wait_idle(server_addr))
    assert st.free_slots == st.total_slots


def test_the_turns_tts_span_is_the_parent_of_the_call():
    """With Pipecat's tracing on, its `tts` span of the turn (traced_tts, as Pipecat traces
    its own services) is what the call's traceparent names: orpheus-svc's span for the call
    continues the agent's trace. Against the in-process fake server, which records the
    call's metadata (the server's side of the continuation: tests/telemetry)."""
    require("opentelemetry.sdk.trace")  # pipecat-ai[tracing]
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # what pipecat.utils.tracing.setup_tracing does
    fake = FakeServer("pipecat-traced").start()
    try:
        tts = OrpheusTTSService(target=fake.target, voice="tara")
        asyncio.run(run_pipeline(tts, turn("Hello there.", " How are you?") + [EndFrame()],
                                 enable_tracing=True, conversation_id="conv-1"))
        (call,) = [c for c in fake.servicer.calls if c.method == "StreamingSynthesize"]
    finally:
        fake.stop()
    _, trace_id, span_id, flags = call.metadata["traceparent"].split("-")
    tts_spans = [s for s in exporter.get_finished_spans() if s.name == "tts"]
    assert tts_spans, [s.name for s in exporter.get_finished_spans()]
    assert any(f"{s.context.trace_id:032x}" == trace_id and f"{s.context.span_id:016x}" == span_id
               for s in tts_spans), (call.metadata["traceparent"], tts_spans)
    assert int(flags, 16) & 1  # sampled


# -- what the assistant context holds after an interruption ---------------------------------
#
# A real pipeline: Pipecat's own user and assistant aggregators around the service and an
# output transport that plays audio in real time (it writes each chunk as a sound card
# takes it); the user barges in once the transport has played `at_s` seconds. "Heard" is
# what the transport played by then: the words whose start (the server's last times for
# them) lies before that point, or the segments whose first sample does.

class PlayingOutput(BaseOutputTransport):
    """An output transport that plays in real time: each write takes as long as its audio
    lasts, and `played` counts the samples written."""

    def __init__(self) -> None:
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=RATE,
                                         audio_out_end_silence_secs=0))
        self.played = 0
        self._free_at: float | None = None  # when the device has played what it was given
        self._marks: list[tuple[int, asyncio.Event]] = []

    async def start(self, frame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame) -> bool:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._free_at = max(self._free_at or now, now) + len(frame.audio) / 2 / frame.sample_rate
        await asyncio.sleep(self._free_at - now)
        self.played += len(frame.audio) // 2
        for mark in [m for m in self._marks if self.played >= m[0]]:
            self._marks.remove(mark)
            mark[1].set()
        return True

    def after(self, seconds: float) -> asyncio.Event:
        """Set once `seconds` of audio have been played."""
        ev = asyncio.Event()
        self._marks.append((round(seconds * RATE), ev))
        return ev


class RecordedTTS(OrpheusTTSService):
    """The service, with every event of its calls recorded (the server's times)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.events: list[object] = []  # the last call's

    async def start(self, frame):
        await super().start(frame)
        open_session = self._client.session

        def session(*args, **kwargs):
            self.events = []
            return _Recorded(open_session(*args, **kwargs), self.events)

        self._client.session = session

    def words_heard(self, seconds: float) -> list[str]:
        """The words whose audio started before `seconds` (the server's last times)."""
        last: dict[int, WordTimings] = {}
        for ev in self.events:
            if isinstance(ev, WordTimings):
                last[ev.segment_index] = ev
        return [w.text for i in sorted(last) for w in last[i].words
                if w.start_sample < seconds * RATE]

    def segments_heard(self, seconds: float) -> list[str]:
        return [ev.text for ev in self.events
                if isinstance(ev, SegmentStart) and ev.sample_offset < seconds * RATE]


class _Recorded:
    """A session whose events are also appended to `events` as they are read."""

    def __init__(self, session, events: list) -> None:
        self._session, self._events = session, events

    def __getattr__(self, name):
        return getattr(self._session, name)

    async def __aiter__(self):
        async for ev in self._session:
            self._events.append(ev)
            yield ev


def tokens(reply: str) -> list[str]:
    """The reply as an LLM streams it: a word a token, each with its leading space."""
    return [w if i == 0 else " " + w for i, w in enumerate(reply.split())]


def response(reply: str) -> list:
    return [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens(reply)],
            LLMFullResponseEndFrame()]


def interrupted_turn(tts, reply: str, at_s: float, warm_up: str | None = None):
    """Plays `reply` (a whole LLM response) through a real pipeline, barges in after `at_s`
    seconds of its played audio, and returns (the assistant message, seconds played).

    With `warm_up`, a turn of that text comes first and is barged in on once the server
    has ended one of its segments: the service has then measured this voice's segment
    lengths against the server's estimate, as it has in any conversation after its first
    sentence."""
    context = LLMContext([{"role": "user", "content": "Tell me something."}])
    aggregators = LLMContextAggregatorPair(context)
    out = PlayingOutput()
    seen = {}

    def assistant_messages():
        return [m for m in context.get_messages() if m["role"] == "assistant"]

    async def barge_in(worker, count):
        await worker.queue_frame(InterruptionFrame())
        # the aggregator adds the assistant message when it sees the interruption
        while len(assistant_messages()) < count:
            await asyncio.sleep(0.01)

    async def conversation(worker):
        if warm_up is not None:
            await worker.queue_frames(response(warm_up))
            while not any(isinstance(ev, SegmentEnd) for ev in tts.events):
                await asyncio.sleep(0.01)
            await barge_in(worker, 1)
            out.played = 0
        await worker.queue_frames(response(reply))
        await asyncio.wait_for(out.after(at_s).wait(), 120)
        seen["played"] = out.played / RATE
        await barge_in(worker, 2 if warm_up is not None else 1)
        await worker.queue_frame(EndFrame())

    async def main():
        worker = PipelineWorker(
            Pipeline([aggregators.user(), tts, out, aggregators.assistant()]),
            params=PipelineParams(audio_out_sample_rate=RATE))
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        run = asyncio.ensure_future(runner.run())
        await asyncio.wait_for(conversation(worker), 240)
        await asyncio.wait_for(run, 120)

    asyncio.run(main())
    return assistant_messages()[-1]["content"], seen["played"]


def assert_heard(said: str, heard: list[str], reply: str) -> None:
    """The assistant message is the reply's first words, within one word of those heard."""
    words = said.split()
    assert words == reply.split()[:len(words)], said
    assert abs(len(words) - len(heard)) <= 1, (said, heard)


REPLY = ("Sure, here is a short story about a fox. The fox ran home through the woods. "
         "It ate its dinner and slept until the morning. Then it woke up and ran again.")


def test_an_interrupted_turn_keeps_only_what_was_played(server_addr):
    """Against the live server, with its word timings: after the barge-in the context holds
    the reply's first words, every segment whose audio had ended and at most the words of
    the one playing; never the whole reply. (Within one word needs the true times, which a
    segment cut mid-way never gets from the server: the fake server's test below has them.
    The demo model's segments also run about three times the expected length, which only
    the final times and the service's measured ratio correct.)"""
    tts = RecordedTTS(target=server_addr, voice="tara", sampling=Sampling(seed=5),
                      stop_frame_timeout_s=120)
    said, played = interrupted_turn(tts, REPLY, at_s=2.0)
    words = said.split()
    assert 0 < len(words) < len(REPLY.split())
    assert words == REPLY.split()[:len(words)], said
    starts = {ev.segment_index: ev for ev in tts.events if isinstance(ev, SegmentStart)}
    ends = {ev.segment_index: ev for ev in tts.events if isinstance(ev, SegmentEnd)}
    done = [starts[i].text for i in sorted(ends)
            if (starts[i].sample_offset + ends[i].num_samples) / RATE <= played]
    begun = tts.segments_heard(played)
    assert said.startswith(" ".join(done)), (said, done)
    assert len(words) <= len(" ".join(begun).split()), (said, begun)


def test_without_word_timings_the_context_holds_the_segments_heard(server_addr):
    """word_timestamps=False (as a server without them): each segment's text goes into the
    context when its audio starts playing, so the context is right to the segment."""
    tts = RecordedTTS(target=server_addr, voice="tara", sampling=Sampling(seed=5),
                      stop_frame_timeout_s=120, word_timestamps=False)
    said, played = interrupted_turn(tts, REPLY, at_s=2.0)
    heard = tts.segments_heard(played)
    assert not any(isinstance(ev, WordTimings) for ev in tts.events)
    assert heard and said == " ".join(heard) and said != REPLY


FAKE_REPLY = "One two three. Four five six. Seven eight nine."
# the fake gives each word three chunks (2048 samples at 24 kHz each): 0.256 s a word
WORD_S = 3 * 2048 / 24000


def test_exact_word_times_put_exactly_the_words_heard_in_the_context():
    """A server whose word times are exact (the in-process fake): barged in just after the
    fourth word began, the context holds four words, where segments would give six."""
    fake = FakeServer("pipecat-words", word_timings=True, chunks_per_word=3).start()
    try:
        tts = RecordedTTS(target=fake.target, voice="tara")
        said, played = interrupted_turn(tts, FAKE_REPLY, at_s=3 * WORD_S + 0.08)
    finally:
        fake.stop()
    heard = tts.words_heard(played)
    assert heard == ["One", "two", "three.", "Four"], (heard, played)
    assert_heard(said, heard, FAKE_REPLY)
    assert len(said.split()) < 6


def test_a_server_without_word_timings_gives_the_segments_heard():
    """A server older than word timings (the fake without them ignores the option the
    service asks for): the context holds the segments whose audio had started."""
    fake = FakeServer("pipecat-old", chunks_per_word=3).start()
    try:
        tts = RecordedTTS(target=fake.target, voice="tara")
        said, played = interrupted_turn(tts, FAKE_REPLY, at_s=3 * WORD_S + 0.08)
    finally:
        fake.stop()
    assert tts.segments_heard(played) == ["One two three.", "Four five six."]
    assert said == "One two three. Four five six."
