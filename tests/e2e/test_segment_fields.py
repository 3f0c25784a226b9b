"""Segment metadata against the real demo server: why each segment ended (SegmentEnd.cause),
its range in the session's text, and Flush ids echoed on the segment they close; and old
clients (the stubs from before these fields) still work against this server."""

import json
import subprocess
import sys
from pathlib import Path

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

from .rpc import check_stream_invariants, requests

OLD_STUBS = Path(__file__).parent / "stubs_without_segment_fields"


def flush(flush_id=""):
    return pb.StreamingSynthesizeRequest(flush=pb.Flush(id=flush_id))


def test_segments_carry_cause_range_and_flush_id(stub):
    frags = ["  Hel", "lo there. How", " are", flush("f-1"), " you", flush(""), " Bye now"]
    text = "".join(f for f in frags if isinstance(f, str))
    responses = list(stub.StreamingSynthesize(requests(frags, sampling=pb.SamplingOptions(seed=1)),
                                              timeout=120))
    check_stream_invariants(responses)
    starts = [r.segment_start for r in responses if r.WhichOneof("response") == "segment_start"]
    ends = [r.segment_end for r in responses if r.WhichOneof("response") == "segment_end"]
    assert [(e.text, e.cause, e.flush_id) for e in ends] == [
        ("Hello there.", pb.SEGMENT_END_CAUSE_SENTENCE, ""),
        ("How are", pb.SEGMENT_END_CAUSE_FLUSH, "f-1"),
        ("you", pb.SEGMENT_END_CAUSE_FLUSH, ""),
        ("Bye now", pb.SEGMENT_END_CAUSE_END_OF_INPUT, ""),
    ]
    for s, e in zip(starts, ends):
        assert text[e.text_start:e.text_end] == e.text
        assert (s.text_start, s.text_end, s.cause, s.flush_id) == (
            e.text_start, e.text_end, e.cause, e.flush_id)
    assert ends[0].text_start == 2


def test_synthesize_segments_end_at_sentences_then_end_of_input(stub):
    responses = list(stub.Synthesize(pb.SynthesizeRequest(text="One. Two", voice="tara"),
                                     timeout=120))
    ends = [r.segment_end for r in responses if r.WhichOneof("response") == "segment_end"]
    assert [(e.text, e.cause, e.text_start, e.text_end) for e in ends] == [
        ("One.", pb.SEGMENT_END_CAUSE_SENTENCE, 0, 4),
        ("Two", pb.SEGMENT_END_CAUSE_END_OF_INPUT, 5, 8)]


_OLD_CLIENT = r"""
import json, sys
import grpc
import tts_pb2 as pb, tts_pb2_grpc
assert not hasattr(pb, "SegmentEndCause"), "these must be the stubs from before the new fields"
stub = tts_pb2_grpc.TTSServiceStub(grpc.insecure_channel(sys.argv[1]))
def reqs():
    yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
    yield pb.StreamingSynthesizeRequest(text="Hello there. How")
    yield pb.StreamingSynthesizeRequest(flush=pb.Flush())
    yield pb.StreamingSynthesizeRequest(text=" Bye.")
out = {"kinds": [], "ends": [], "samples": 0}
for r in stub.StreamingSynthesize(reqs(), timeout=120):
    k = r.WhichOneof("response")
    out["kinds"].append(k)
    if k == "segment_end":
        out["ends"].append(r.segment_end.text)
    if k == "audio":
        out["samples"] += r.audio.num_samples
    if k == "summary":
        out["summary_samples"] = r.summary.num_samples
print(json.dumps(out))
"""


def test_old_client_stubs_still_work_against_this_server(server):
    """The stubs from before Flush.id / SegmentEndCause / text ranges, in a process of their
    own (they register the same proto file name as the current ones), against this server."""
    proc = subprocess.run([sys.executable, "-c", _OLD_CLIENT, server.addr],
                          capture_output=True, text=True, timeout=180,
                          env={"PYTHONPATH": str(OLD_STUBS), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ends"] == ["Hello there.", "How", "Bye."]
    assert out["kinds"][-1] == "summary"
    assert out["samples"] == out["summary_samples"] > 0
