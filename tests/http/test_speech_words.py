"""Word timings in /v1/audio/speech's SSE stream (opt-in "word_timestamps", ours), against the
demo server with short segments; the audio body refuses the option."""

import base64
import json

import httpx

TEXT = "Hi, I paid $3.50. <laugh> Bye"


def _sse(server, **extra):
    body = {"model": "tts-1", "input": TEXT, "voice": "tara", "response_format": "pcm",
            "stream_format": "sse", **extra}
    events = []
    with httpx.stream("POST", f"{server.http}/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def test_sse_carries_word_timings_before_the_audio_they_time(bounded):
    events = _sse(bounded, word_timestamps=True)
    timed = [e for e in events if e["type"] == "speech.word_timings"]
    latest = {e["segment_index"]: e["words"] for e in timed}
    words = [w for i in sorted(latest) for w in latest[i]]
    assert [TEXT[w["char_start"]:w["char_end"]] for w in words] == \
        ["Hi,", "I", "paid", "$3.50.", "Bye"]
    assert events[0]["type"] == "speech.word_timings" and not events[0]["final"]
    audio = sum(len(base64.b64decode(e["audio"])) // 2 for e in events
                if e["type"] == "speech.audio.delta")
    assert words[-1]["end_sample"] <= audio  # final times: never past the audio sent
    assert events[-1]["type"] == "speech.audio.done"


def test_without_the_option_the_sse_stream_is_openais_and_the_audio_body_refuses_it(bounded):
    assert {e["type"] for e in _sse(bounded)} == {"speech.audio.delta", "speech.audio.done"}
    r = httpx.post(f"{bounded.http}/v1/audio/speech", timeout=60, json={
        "model": "tts-1", "input": TEXT, "response_format": "pcm", "word_timestamps": True})
    assert r.status_code == 400 and "word_timestamps" in r.text
