"""A segment whose prompt cannot fit its slot: INVALID_ARGUMENT over gRPC before it reaches
any backend, and the server keeps every slot (the same admission runs for trtllm)."""

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2, tts_pb2_grpc

from tests.e2e.server_proc import ServerProcess


@pytest.fixture(scope="module")
def short_slots(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.backend=sim",
                        "engine.max_seq_len=64", "engine.max_sessions=2",
                        "engine.max_batch_size=2", name="short-slots")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def test_a_prompt_longer_than_the_slot_is_invalid_argument(short_slots):
    stub = tts_pb2_grpc.TTSServiceStub(short_slots.channel)
    # One segment (no sentence end, under text.max_segment_chars) of ~70 prompt tokens.
    text = ("this single sentence is much longer than sixty four tokens could ever hold "
            "and it keeps going without a full stop so that the segmenter leaves it whole "
            "while the prompt grows past what one slot of sixty four positions can take")
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, voice="tara"), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "text too long" in err.value.details() and "max_seq_len is 64" in err.value.details()
    status = stub.GetStatus(tts_pb2.GetStatusRequest(), timeout=10)
    assert status.free_slots == status.total_slots == 2
    # A text that fits still works on the same server.
    last = list(stub.Synthesize(tts_pb2.SynthesizeRequest(text="Hi.", voice="tara"),
                                timeout=60))[-1]
    assert last.HasField("summary") and last.summary.num_tokens > 0
