"""Whole (non-streamed) responses carry their length (issue 29 item 4): with `"stream":
false` the server answers once the audio is complete, so a WAV's RIFF sizes and a FLAC's
STREAMINFO total are the real ones, read by Python's `wave` and by ffprobe/ffmpeg (never by
our code). Streamed responses keep the open-ended header, as documented (test_openai.py)."""

import io
import json
import shutil
import subprocess
import wave

import httpx
import pytest

from .decode import ffmpeg_decode

FFPROBE = shutil.which("ffprobe")
TEXT = "Hello there."


def _speech(server, **fields):
    body = {"model": "tts-1", "voice": "tara", "input": TEXT, "seed": 5, **fields}
    return httpx.post(f"{server.http}/v1/audio/speech", json=body, timeout=120)


def test_whole_wav_has_its_length_in_the_header(server):
    r = _speech(server, response_format="wav", stream=False)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert "transfer-encoding" not in r.headers
    assert int(r.headers["content-length"]) == len(r.content)
    with wave.open(io.BytesIO(r.content)) as w:
        frames = w.getnframes()
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (24000, 1, 2)
        assert len(w.readframes(frames)) == 2 * frames
    assert frames > 0 and len(r.content) == 44 + 2 * frames  # the header's size is the data's
    assert frames % 2048 == 0  # whole Orpheus frames: nothing cut or padded
    assert len(ffmpeg_decode(r.content, "wav", 24000)) == frames


@pytest.mark.skipif(not FFPROBE, reason="ffprobe not found: run scripts/install-tools.sh")
def test_whole_flac_has_its_total_samples_in_streaminfo(server, tmp_path):
    r = _speech(server, response_format="flac", stream=False)
    assert r.status_code == 200 and int(r.headers["content-length"]) == len(r.content)
    path = tmp_path / "whole.flac"
    path.write_bytes(r.content)
    probe = subprocess.run([FFPROBE, "-v", "error", "-show_streams", "-of", "json", str(path)],
                           capture_output=True, text=True, timeout=60)
    stream = json.loads(probe.stdout)["streams"][0]
    decoded = len(ffmpeg_decode(r.content, "flac", 24000))
    assert decoded > 0 and decoded % 2048 == 0
    assert int(stream.get("duration_ts", 0)) == decoded, stream  # "N/A" before the fix


def test_whole_response_refuses_sse(server):
    r = _speech(server, response_format="wav", stream=False, stream_format="sse")
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
