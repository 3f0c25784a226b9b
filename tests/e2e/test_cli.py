"""The Python client's orpheus-say CLI against the real demo server writes a valid WAV."""

import subprocess
import sys
import wave


def test_orpheus_say_writes_a_valid_wav(server, tmp_path):
    out = tmp_path / "hello.wav"
    proc = subprocess.run([sys.executable, "-m", "orpheus_tts_client.cli", "Hello there.",
                           "-o", str(out), "--server", server.addr, "--voice", "leo"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with wave.open(str(out)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24000)
        assert w.getnframes() > 0 and w.getnframes() % 2048 == 0


def test_orpheus_say_reports_a_server_error(server, tmp_path):
    out = tmp_path / "x.wav"
    proc = subprocess.run([sys.executable, "-m", "orpheus_tts_client.cli", "Hi.", "-o", str(out),
                           "--server", server.addr, "--voice", "nobody"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "tara" in proc.stderr and not out.exists()
