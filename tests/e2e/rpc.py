"""Small helpers to drive the generated stubs in tests."""

import time

from orpheus_tts_client.proto.v1 import tts_pb2 as pb

FLUSH = object()


def requests(fragments, voice="tara", audio_format=None, sampling=None, config=True):
    if config:
        yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(
            voice=voice, audio_format=audio_format, sampling=sampling))
    for f in fragments:
        if f is FLUSH:
            yield pb.StreamingSynthesizeRequest(flush=pb.Flush())
        elif isinstance(f, pb.StreamingSynthesizeRequest):
            yield f
        else:
            yield pb.StreamingSynthesizeRequest(text=f)


def kinds(responses):
    return [r.WhichOneof("response") for r in responses]


def check_stream_invariants(responses):
    """Audio strictly in segment order, contiguous sequence numbers and sample offsets,
    start/end events around each segment, and the summary last. Returns the segments."""
    ks = kinds(responses)
    assert ks[-1] == "summary" and ks.count("summary") == 1
    seq, offset, segments, current = 0, 0, [], None
    for r in responses[:-1]:
        k = r.WhichOneof("response")
        if k == "segment_start":
            assert current is None and r.segment_start.segment_index == len(segments)
            assert r.segment_start.sample_offset == offset
            current = {"text": r.segment_start.text, "samples": 0, "start": offset}
        elif k == "audio":
            a = r.audio
            assert current is not None and a.segment_index == len(segments)
            assert a.sequence_number == seq and a.sample_offset == offset
            assert len(a.audio) == 2 * a.num_samples  # PCM16
            seq += 1
            offset += a.num_samples
            current["samples"] += a.num_samples
        elif k == "segment_end":
            e = r.segment_end
            assert current is not None and e.segment_index == len(segments)
            assert e.num_samples == current["samples"] and e.text == current["text"]
            current.update(tokens=e.num_tokens, reason=e.finish_reason)
            segments.append(current)
            current = None
    assert current is None
    s = responses[-1].summary
    assert s.num_samples == offset and s.num_segments == len(segments)
    assert s.num_tokens == sum(seg["tokens"] for seg in segments)
    return segments


def wait_status(stub, pred, timeout=10.0):
    """Poll GetStatus until `pred(status)` holds; AssertionError with the last one after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = stub.GetStatus(pb.GetStatusRequest())
        if pred(st):
            return st
        time.sleep(0.02)
    raise AssertionError(f"status never matched: {st}")
