"""Regression tests for the shipped defects of issue 10 ("Hostile and broken clients"),
against the demo server (torch backend): each failed on the code before the fix."""

import threading

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .rpc import check_stream_invariants, requests

SERVICE = "/orpheus.tts.v1.TTSService/"
CONFIG = pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara")).SerializeToString()
BAD_UTF8_TEXT = b"\x12\x02\xff\xfe"      # field 2 (text), 2 bytes that are not UTF-8
GARBAGE = b"\xff\xff\xff\xff\xff"        # not a protobuf message at all
# A safety net only: on the unfixed server these calls hung until the client's deadline.
NET_S = 60


def _raw_stream(server, messages, hold: threading.Event | None = None):
    """StreamingSynthesize with raw request bytes; with `hold`, the client does not
    half-close until it is set."""
    def gen():
        yield from messages
        if hold is not None:
            hold.wait(NET_S)
    call = server.channel.stream_stream(
        SERVICE + "StreamingSynthesize", request_serializer=None,
        response_deserializer=pb.StreamingSynthesizeResponse.FromString)
    return call(gen(), timeout=NET_S)


def _status(call):
    with pytest.raises(grpc.RpcError) as err:
        for _ in call:
            pass
    return err.value.code(), err.value.details()


def _wait_no_active(stub):
    """The handler's bookkeeping runs just after the client sees the status: poll briefly."""
    import time
    for _ in range(200):
        st = stub.GetStatus(pb.GetStatusRequest())
        if st.active_sessions == 0 and st.active_generations == 0:
            return st
        time.sleep(0.05)
    raise AssertionError(f"calls left open: {st}")


@pytest.mark.parametrize("bad", [BAD_UTF8_TEXT, GARBAGE], ids=["bad-utf8", "garbage"])
@pytest.mark.parametrize("half_close", [True, False], ids=["half-closed", "open"])
def test_an_undecodable_message_after_the_config_ends_the_call(server, stub, bad, half_close):
    # defect 2: the reader task died silently and the call hung with no status
    hold = None if half_close else threading.Event()
    try:
        code, msg = _status(_raw_stream(server, [CONFIG, bad], hold))
    finally:
        if hold is not None:
            hold.set()
    assert code == grpc.StatusCode.INVALID_ARGUMENT and msg == "request could not be parsed"
    _wait_no_active(stub)


def test_an_undecodable_first_message_or_synthesize_request_is_invalid_argument(server, stub):
    # defect 3: UNKNOWN "Unexpected DecodeError" and an error-level traceback per call
    before = server.logs()
    code, msg = _status(_raw_stream(server, [GARBAGE]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and msg == "request could not be parsed"
    synth = server.channel.unary_stream(SERVICE + "Synthesize", request_serializer=None,
                                        response_deserializer=pb.SynthesizeResponse.FromString)
    code, msg = _status(synth(BAD_UTF8_TEXT.replace(b"\x12", b"\x0a"), timeout=NET_S))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and msg == "request could not be parsed"
    _wait_no_active(stub)
    new = server.logs()[len(before):]
    assert "Traceback" not in new
    assert not [line for line in new.splitlines() if '"level": "error"' in line]
    warnings = [line for line in new.splitlines()
                if "could not be parsed" in line and '"warning"' in line]
    assert len(warnings) == 2 and all("session_id" in line for line in warnings)


def test_seed_at_uint64_max_on_two_segments_does_not_fail_its_neighbours(stub):
    # defect 1: seed + segment index overflowed uint64 in the torch sampler and the whole
    # engine step failed, innocent sessions included
    results: dict[str, object] = {}

    def run(name, sampling, text):
        try:
            results[name] = list(stub.StreamingSynthesize(
                requests([text], sampling=sampling), timeout=NET_S))
        except grpc.RpcError as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=(f"innocent{i}", None,
                                                  "A neighbour speaks. Then once more."))
               for i in range(3)]
    threads.append(threading.Thread(target=run, args=(
        "hostile", pb.SamplingOptions(seed=2 ** 64 - 1), "One sentence. Two sentences.")))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, got in results.items():
        assert not isinstance(got, grpc.RpcError), f"{name}: {got}"
        segments = check_stream_invariants(got)
        assert len(segments) == 2


def test_undecodable_unary_requests_are_invalid_argument(server):
    for method, resp in (("GetStatus", pb.GetStatusResponse), ("ListVoices", pb.ListVoicesResponse)):
        rpc = server.channel.unary_unary(SERVICE + method, request_serializer=None,
                                         response_deserializer=resp.FromString)
        with pytest.raises(grpc.RpcError) as err:
            rpc(GARBAGE, timeout=NET_S)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "request could not be parsed"
