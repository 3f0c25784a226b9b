"""Word timings on the WebSocket stream (opt-in "word_timestamps" in its config), against the
demo server with short segments."""

import json

from websockets.sync.client import connect

from .test_websocket import receive_all, ws_url

TEXT = "Hi, I paid $3.50. <laugh> Bye"


def _speak(server, **config):
    with connect(ws_url(server)) as ws:
        ws.send(json.dumps({"type": "config", "voice": "tara", **config}))
        ws.send(json.dumps({"type": "text", "text": TEXT}))
        ws.send(json.dumps({"type": "end"}))
        return receive_all(ws)


def test_word_timings_come_before_each_segments_audio_and_slice_the_text(bounded):
    events, order = _speak(bounded, word_timestamps=True)
    timed = [e for e in events if e["type"] == "word_timings"]
    latest = {}
    for e in timed:
        latest[e["segment_index"]] = e["words"]
        assert all(w["final"] == e["final"] for w in e["words"])
    words = [w for i in sorted(latest) for w in latest[i]]
    assert [w["text"] for w in words] == ["Hi,", "I", "paid", "$3.50.", "Bye"]
    assert [TEXT[w["char_start"]:w["char_end"]] for w in words] == [w["text"] for w in words]
    kinds = [k for k, _ in order]
    t = 0  # timed[t] is the word_timings event at order[i]
    for i, (kind, index) in enumerate(order):
        if kind == "word_timings":
            if timed[t]["final"]:
                assert order[i + 1] == ("segment_end", index)
            else:
                assert order[i - 1] == ("segment_start", index) and kinds[i + 1] == "audio"
            t += 1
    ends = [e for e in events if e["type"] == "segment_end"]
    starts = [e for e in events if e["type"] == "segment_start"]
    for s, e in zip(starts, ends):
        times = latest.get(s["segment_index"])
        if times:
            assert times[-1]["end_sample"] == s["sample_offset"] + e["num_samples"]


def test_without_the_option_there_are_none_and_a_bad_value_is_refused(bounded):
    events, _ = _speak(bounded)
    assert "word_timings" not in [e["type"] for e in events]
    with connect(ws_url(bounded)) as ws:
        ws.send(json.dumps({"type": "config", "word_timestamps": "yes"}))
        events, _ = receive_all(ws)
    assert events[0]["code"] == "INVALID_ARGUMENT" and "word_timestamps" in events[0]["message"]
