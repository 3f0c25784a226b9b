"""Property-based tests of the StreamingSynthesize protocol against a real server on a port
(sim backend), issue 10: random sequences of config / text / flush / garbage / empty
messages, ended by a half-close, by going quiet (the idle timeout ends it) or by a cancel.

Invariants: a status always arrives; it is one of the documented set; a call that succeeds
keeps the stream contract (gap-free sequence numbers, contiguous offsets, summary sums);
afterwards GetStatus shows no open call, no active generation and every slot free."""

import threading
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import check_stream_invariants
from .server_proc import ServerProcess

NET_S = 60  # client safety net; a call ended by it fails the property (its message differs)
SERVICE = "/orpheus.tts.v1.TTSService/StreamingSynthesize"
C = grpc.StatusCode
# docs/api.md, "Status codes": what a StreamingSynthesize call may end with
DOCUMENTED = {C.OK, C.INVALID_ARGUMENT, C.FAILED_PRECONDITION, C.DEADLINE_EXCEEDED,
              C.RESOURCE_EXHAUSTED, C.CANCELLED}


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("props"), "engine.backend=sim",
                        "engine.max_sessions=4", "session.idle_timeout_seconds=0.3",
                        "session.stalled_consumer_timeout_seconds=5",
                        "text.max_text_chars=400", name="props")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def _msg(**kw) -> bytes:
    return pb.StreamingSynthesizeRequest(**kw).SerializeToString()


texts = st.text(alphabet=st.sampled_from(list("abc XYZ.,!?\n'é") + ["\u2026", "\U0001F600"]),
                max_size=60)
messages = st.one_of(
    texts.map(lambda t: _msg(text=t)),
    st.text(max_size=8).map(lambda i: _msg(flush=pb.Flush(id=i))),
    st.just(_msg(config=pb.SynthesisConfig(voice="tara"))),
    st.just(b""),  # an empty message: neither text nor flush
    st.binary(min_size=1, max_size=12),  # garbage: usually not a message at all
    st.just(b"\x12\x02\xff\xfe"),  # text that is not UTF-8
)
first = st.one_of(
    st.builds(lambda v, r: _msg(config=pb.SynthesisConfig(
        voice=v, audio_format=pb.AudioFormat(sample_rate_hz=r))),
        st.sampled_from(["tara", "TARA", "", "bob"]), st.sampled_from([0, 24000, 16000, 44100])),
    messages)


def _wait_clean(stub):
    for _ in range(400):
        s = stub.GetStatus(pb.GetStatusRequest())
        if s.active_sessions == 0 and s.active_generations == 0 and s.free_slots == s.total_slots:
            return
        time.sleep(0.025)
    raise AssertionError(f"left open after the call: {s}")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(head=first, body=st.lists(messages, max_size=6),
       ending=st.sampled_from(["half-close", "half-close", "quiet", "cancel"]),
       cancel_after=st.integers(0, 3))
def test_every_call_ends_with_a_documented_status_and_leaves_nothing_open(
        sim_server, head, body, ending, cancel_after):
    hold = threading.Event()

    def gen():
        yield head
        yield from body
        if ending != "half-close":
            hold.wait(NET_S)

    call = sim_server.channel.stream_stream(
        SERVICE, request_serializer=None,
        response_deserializer=pb.StreamingSynthesizeResponse.FromString)(gen(), timeout=NET_S)
    got, code, details = [], C.OK, ""
    try:
        for r in call:
            got.append(r)
            if ending == "cancel" and len(got) > cancel_after:
                call.cancel()
        if ending == "cancel" and len(got) <= cancel_after:
            call.cancel()  # ended before we got to cancel it: cancelling now is a no-op
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details()
    finally:
        hold.set()
    assert code in DOCUMENTED, (code, details)
    if code == C.CANCELLED:
        assert ending == "cancel", details  # only the client cancels
    if code == C.DEADLINE_EXCEEDED:
        assert "session.idle_timeout_seconds" in details, details  # ours, not the safety net
        assert ending != "half-close"
    if code == C.OK or (got and got[-1].WhichOneof("response") == "summary"):
        check_stream_invariants(got)
    _wait_clean(tts_pb2_grpc.TTSServiceStub(sim_server.channel))


def test_every_call_left_exactly_one_closing_log_line(sim_server):
    """After the property test above: each call the server opened has one closing line
    (refused, ended with a status, cancelled, or finished OK), with its session id."""
    import json
    stub = tts_pb2_grpc.TTSServiceStub(sim_server.channel)
    _wait_clean(stub)
    closing: dict[str, list[str]] = {}
    for line in sim_server.logs().splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if rec.get("event") in ("call refused", "call ended", "call cancelled",
                                "session finished"):
            closing.setdefault(rec["session_id"], []).append(rec["event"])
    total = stub.GetStatus(pb.GetStatusRequest()).sessions_total
    assert total > 0 and len(closing) == total
    for sid, events in closing.items():
        # an idle-timed-out call sends its summary first, then ends DEADLINE_EXCEEDED
        assert events in (["call refused"], ["call ended"], ["call cancelled"],
                          ["session finished"], ["session finished", "call ended"]), (sid, events)
