"""The one call runner (server/calls.py SessionCall) that the gRPC servicer and the HTTP
and WebSocket routes run every session through: the runtime check before the settings,
the stalled-consumer clock only while the edge holds an output, the summary counted once
it was taken. tests/http/test_one_runner.py shows both edges use it."""

import asyncio

import pytest

from orpheus_svc.config import load_config
from orpheus_svc.core.request import SamplingParams
from orpheus_svc.core.status import Status
from orpheus_svc.server.calls import NOT_SERVING, SessionCall
from orpheus_svc.core.errors import SessionError
from orpheus_svc.server.session import Summary, TextIn
from orpheus_svc.server.settings import SessionSettings
from orpheus_svc.server.state import OpenCall, ServerState

from .test_session import FakeRuntime

SETTINGS = SessionSettings("tara", "pcm16", 24000, SamplingParams())


def serving_state(runtime=None):
    state = ServerState(load_config(overrides={"session.idle_timeout_seconds": 0,
                                               "session.stalled_consumer_timeout_seconds": 0}))
    state.runtime, state.serving = runtime or FakeRuntime(), True
    return state


def test_a_server_not_serving_refuses_before_it_reads_the_settings():
    state = ServerState(load_config(overrides={}))
    read = []
    with pytest.raises(SessionError) as err:
        SessionCall(state, OpenCall("c1", "Synthesize", None), lambda: read.append(1))
    assert err.value.code == Status.UNAVAILABLE and err.value.message == NOT_SERVING
    assert read == []


def test_a_settings_refusal_comes_out_as_it_was_raised_and_opens_no_session():
    refusal = SessionError(Status.INVALID_ARGUMENT, "unknown voice", field="voice")

    def refuse():
        raise refusal

    call = OpenCall("c1", "http.ws", None)
    with pytest.raises(SessionError) as err:
        SessionCall(serving_state(), call, refuse)
    assert err.value is refusal and call.session is None


def test_the_stall_clock_runs_only_while_the_edge_holds_an_output_and_the_summary_counts_once():
    state = serving_state()
    call = OpenCall("c1", "StreamingSynthesize", None)
    run = SessionCall(state, call, SETTINGS)
    assert call.session is run.session and run.session.session_id == "c1"
    held = []

    async def edge():
        async def source():
            yield TextIn("One. Two.")

        async for out in run.outputs(source()):
            # the edge is writing `out`: the watchdog may cut this very task
            held.append((call.writing_since is not None, call.task is asyncio.current_task(),
                         call.writes, state.audio_seconds_total))
            await asyncio.sleep(0)
        return out

    last = asyncio.run(asyncio.wait_for(edge(), 30))
    assert isinstance(last, Summary)
    assert all(clock and task for clock, task, _, _ in held)
    assert [writes for _, _, writes, _ in held] == list(range(len(held)))  # one per output taken
    assert call.writing_since is None and call.writes == len(held)
    # counted after the client took the summary, and once: 2 segments x 2 frames x 2048
    assert held[-1][3] == 0 and state.audio_seconds_total == pytest.approx(4 * 2048 / 24000)


class FirstSegmentOnly(FakeRuntime):
    """Segment 0 finishes at once; every later one runs until it is cancelled."""

    def submit(self, req, gen_id):
        self.hold = req.segment_index > 0
        super().submit(req, gen_id)


def test_an_edge_that_stops_reading_cancels_the_sessions_generations_at_once():
    rt = FirstSegmentOnly()
    run = SessionCall(serving_state(rt), OpenCall("c1", "http.speech", None), SETTINGS)

    async def edge():
        async def source():
            yield TextIn("One. Two. Three.")

        outputs = run.outputs(source())
        await outputs.__anext__()  # segment 0 started; segment 1 generating
        assert len(rt.submitted) == 2 and not rt.cancelled
        await outputs.aclose()  # the client went away while the edge held an output
        # now, not once the garbage collector finds the session's own generator
        assert rt.cancelled == [rt.submitted[1][0]]

    asyncio.run(asyncio.wait_for(edge(), 30))
