"""Long text end to end: 20,000 characters of mixed prose (numbers, lists, quotes, a long
stretch with no sentence end) sent as one Synthesize text come back as contiguous segments
that cover the whole text, none cut short by its token budget.

The server runs the sim backend (engine/sim/backend.py): everything but the model is real (segmenter,
normaliser, budgets, scheduler, flusher, gRPC), and each segment's utterance length follows
a model of real speech (about 15 characters per second of the text the model is given, with
a log-normal spread), so a "length" finish here means a budget too small for a plausible
utterance. The demo checkpoint cannot answer that question: its random weights almost never
emit the stop id, so every demo segment ends at its budget (docs/long-text.md).
"""

import re

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .rpc import check_stream_invariants
from .server_proc import ServerProcess

TARGET_CHARS = 20_000


def long_text(target: int = TARGET_CHARS) -> str:
    """Deterministic mixed prose of at least `target` characters."""
    parts, i = [], 0
    while sum(map(len, parts)) < target:
        i += 1
        parts.append(
            f"Chapter {i}. On 12/{i % 28 + 1:02d}/2024 at {i % 12 + 1}:30 pm, Dr. Alvarez paid "
            f"${i * 3}.50 for {i % 9 + 2} kg of coffee, about {i * 7 % 100}% more than in 1999. "
            f"\"Is that really the price?\" she asked. \"Yes,\" he said, \"it is.\"\n"
            f"Things to do:\n1. Call Mr. Smith at 555-{100 + i % 900:03d}-{1000 + i:04d}.\n"
            f"2. Visit www.example.com/page{i} and write to team{i}@example.org!\n"
            f"- Buy {i + 1} apples, e.g. the green ones; then rest.\n")
        if i % 7 == 3:
            # a long stretch with no sentence end at all: only commas and spaces
            parts.append(", ".join(f"and then the {k}th quiet river bend near mile {i * 10 + k}"
                                   for k in range(70)) + "\n")
    return "".join(parts)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    text = long_text()
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.backend=sim",
                        "engine.max_sessions=64", "engine.max_batch_size=64",
                        "engine.max_waiting=64", "text.max_text_chars=25000",
                        "text.max_segments_in_flight=64", name="longtext")
    try:
        srv.wait_serving()
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        responses = list(stub.Synthesize(pb.SynthesizeRequest(
            text=text, sampling=pb.SamplingOptions(seed=11)), timeout=600))
    finally:
        srv.stop()
    return text, responses


def test_the_text_is_long_and_mixed():
    text = long_text()
    assert len(text) >= TARGET_CHARS
    longest_without_end = max(len(s) for s in re.split(r"[.!?\n]", text))
    assert longest_without_end > 3000  # the no-sentence-end stretch is really there
    for needle in ("$", "%", "\n1. ", "\"", "@", "www.", "12/"):
        assert needle in text


def test_segments_are_contiguous_and_cover_the_whole_text(result):
    text, responses = result
    segments = check_stream_invariants(responses)
    starts = [r.segment_start for r in responses if r.WhichOneof("response") == "segment_start"]
    assert len(starts) == len(segments) > 50
    pos = 0
    for s in starts:
        assert text[s.text_start:s.text_end] == s.text  # the range holds the text it names
        assert text[pos:s.text_start].strip() == ""  # nothing skipped between segments
        assert s.text_end > s.text_start
        pos = s.text_end
    assert text[pos:].strip() == ""  # nothing left after the last one
    assert all(seg["samples"] > 0 for seg in segments)


def test_no_segment_is_cut_short_by_its_token_budget(result):
    _, responses = result
    ends = [r.segment_end for r in responses if r.WhichOneof("response") == "segment_end"]
    reasons = {reason: sum(e.finish_reason == reason for e in ends)
               for reason in sorted({e.finish_reason for e in ends})}
    print(f"\n{len(ends)} segments, finish reasons {reasons}, "
          f"longest segment {max(len(e.text) for e in ends)} chars")
    assert reasons.get("length", 0) == 0, reasons
    assert reasons == {"stop": len(ends)}


def long_chinese_text(target: int = 2_000) -> str:
    """Deterministic Mandarin prose with quotes, numbers and a 600-character stretch of
    clauses with no sentence end."""
    parts, i = [], 0
    while sum(map(len, parts)) < target:
        i += 1
        parts.append(f"第{i}章。今天天气很好，我们走了{i * 3}.5公里！他说：“真的吗？”她回答：“是的。”"
                     f"然后我们在湖边喝茶，聊了{i % 12 + 1}个小时。\n")
        if i % 5 == 2:
            parts.append("，".join(f"我们经过第{k}座小桥和一片安静的竹林" for k in range(40)) + "\n")
    return "".join(parts)


@pytest.fixture(scope="module")
def chinese_result(tmp_path_factory):
    text = long_chinese_text()
    srv = ServerProcess(tmp_path_factory.mktemp("logs"), "engine.backend=sim",
                        "model.voices=长乐:zh, 白芷:zh", "engine.max_sessions=64",
                        "engine.max_batch_size=64", "engine.max_waiting=64",
                        "text.max_text_chars=5000", "text.max_segments_in_flight=64",
                        name="longtext-zh")
    try:
        srv.wait_serving()
        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        responses = list(stub.Synthesize(pb.SynthesizeRequest(
            text=text, sampling=pb.SamplingOptions(seed=5)), timeout=600))
    finally:
        srv.stop()
    return text, responses


def test_chinese_long_text_is_covered_by_short_segments_none_cut_short(chinese_result):
    text, responses = chinese_result
    segments = check_stream_invariants(responses)
    starts = [r.segment_start for r in responses if r.WhichOneof("response") == "segment_start"]
    pos = 0
    for s in starts:
        assert text[s.text_start:s.text_end] == s.text
        assert text[pos:s.text_start].strip() == ""
        pos = s.text_end
    assert text[pos:].strip() == ""
    # a Chinese character is about three Latin letters of speech: the limit (250 in the
    # conversational profile) is scaled to 75 characters
    assert max(len(s.text) for s in starts) <= 75
    reasons = [r.segment_end.finish_reason for r in responses
               if r.WhichOneof("response") == "segment_end"]
    print(f"\n{len(reasons)} Chinese segments, finish reasons "
          f"{ {x: reasons.count(x) for x in set(reasons)} }")
    assert reasons == ["stop"] * len(segments)
