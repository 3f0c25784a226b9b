"""orpheus-say: WAV output, summary, errors, and incremental --stream from stdin."""

import io
import os
import subprocess
import sys
import time
import wave

from orpheus_tts_client import cli

from .fake_server import CHUNKS_PER_SEGMENT, chunk_pcm, chunk_samples


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        return w.getnchannels(), w.getsampwidth(), w.getframerate(), w.readframes(w.getnframes())


def test_cli_writes_a_valid_pcm16_wav_and_a_summary(fake, tmp_path):
    out = tmp_path / "hello.wav"
    err = io.StringIO()
    rc = cli.main(["Hello there. How are you?", "-o", str(out), "--server", fake.target,
                   "--voice", "leah"], stderr=err)
    assert rc == 0, err.getvalue()
    channels, width, rate, frames = read_wav(out)
    n = chunk_samples(24000)
    assert (channels, width, rate) == (1, 2, 24000)
    assert frames == b"".join(chunk_pcm(i, n) for i in range(2 * CHUNKS_PER_SEGMENT))
    summary = err.getvalue()
    assert "TTFB" in summary and "2 segments" in summary and f"{4 * n / 24000:.2f} s" in summary
    assert fake.servicer.calls[-1].method == "Synthesize"


def test_cli_rate_option_sets_the_wav_rate(fake, tmp_path):
    out = tmp_path / "x.wav"
    assert cli.main(["Hi.", "-o", str(out), "--server", fake.target, "--rate", "16000", "-q"],
                    stderr=io.StringIO()) == 0
    _, _, rate, frames = read_wav(out)
    assert rate == 16000 and len(frames) == 2 * CHUNKS_PER_SEGMENT * chunk_samples(16000)


def test_cli_reads_whole_stdin_without_stream(fake, tmp_path):
    out = tmp_path / "x.wav"
    rc = cli.main(["-o", str(out), "--server", fake.target], stdin=io.StringIO("One.\nTwo.\n"),
                  stderr=io.StringIO())
    assert rc == 0
    assert fake.servicer.calls[-1].texts == ["One.\nTwo.\n"]


def test_cli_error_prints_the_servers_message_and_exits_nonzero(fake, tmp_path):
    out = tmp_path / "x.wav"
    err = io.StringIO()
    rc = cli.main(["Hi.", "-o", str(out), "--server", fake.target, "--voice", "nobody"],
                  stderr=err)
    assert rc == 1
    assert "INVALID_ARGUMENT" in err.getvalue() and "unknown voice 'nobody'" in err.getvalue()
    assert not out.exists()  # no half-written file left behind


def test_cli_stream_pushes_each_stdin_line_as_it_arrives(fake, tmp_path):
    """The second line is written only after the first line's audio was sent back, so the
    run can only finish if the CLI sent the first line while stdin was still open."""
    out = tmp_path / "stream.wav"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "orpheus_tts_client.cli", "--stream", "-o", str(out),
         "--server", fake.target],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        proc.stdin.write("Hello there\n")  # no sentence end: the line break cuts it
        proc.stdin.flush()
        assert fake.wait_segments_sent(1, timeout=10), "first line was not streamed"
        assert proc.poll() is None  # still waiting for more stdin
        t_second = time.monotonic()
        _, err = proc.communicate("How are you?\n", timeout=10)  # then closes stdin
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    rec = fake.servicer.calls[-1]
    assert rec.kinds == ["config", "text", "text"]
    assert rec.texts == ["Hello there\n", "How are you?\n"]
    assert rec.items[1][2] < t_second <= rec.items[2][2]
    _, _, rate, frames = read_wav(out)
    assert rate == 24000 and len(frames) == 2 * 2 * CHUNKS_PER_SEGMENT * chunk_samples(24000)
    assert "2 segments" in err
