"""The examples/ pipelines write a WAV from a live server (each where its framework is),
with orpheus-say's flag names and no deprecation notice from the framework."""

import importlib.util
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from .conftest import require

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


CASES = pytest.mark.parametrize("script,module", [("pipecat_to_wav.py", "pipecat"),
                                                  ("livekit_to_wav.py", "livekit.agents")])


def framework(module):
    try:
        require(module)
    except ImportError:
        # each compat venv has one framework; the other's example runs in its own venv
        pytest.skip(f"{module} is not installed in this venv")


@CASES
def test_example_writes_a_wav(script, module, server_addr, tmp_path):
    framework(module)
    out = tmp_path / "reply.wav"
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--server", server_addr,
                           "--rate", "16000", "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Pipecat 1.14 logged PipelineTask, PipelineRunner and WorkerRunner.run(worker) here
    assert "deprecated" not in proc.stderr.lower(), proc.stderr[-3000:]
    with wave.open(str(out)) as wav:
        assert wav.getframerate() == 16000 and wav.getnchannels() == 1
        assert wav.getsampwidth() == 2 and wav.getnframes() > 16000 // 10


@CASES
def test_example_takes_its_old_flag_names_with_a_note(script, module, capsys):
    framework(module)
    spec = importlib.util.spec_from_file_location(f"example_{module}", EXAMPLES / script)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = example.parse_args(["--target", "tts:50051", "--out", "old.wav"])
    assert (args.server, args.output) == ("tts:50051", "old.wav")
    err = capsys.readouterr().err
    assert "--target is now --server" in err and "--out is now --output" in err
    assert example.parse_args(["--server", "tts:1", "-o", "new.wav"]).output == "new.wav"


def test_the_pipecat_examples_trace_continues_into_the_servers(server_addr, tmp_path):
    """The example with OTEL_TRACES_EXPORTER=otlp: Pipecat's `tts` span and the server's
    call span land in one trace, the server's a child of Pipecat's. scripts/test.sh traces
    its live server to a receiver that writes every span to ORPHEUS_SPANS_FILE, and gives the
    example the same endpoint (ORPHEUS_OTLP_ENDPOINT)."""
    framework("pipecat")
    import json
    import os
    import time

    spans_file, endpoint = os.environ.get("ORPHEUS_SPANS_FILE"), os.environ.get("ORPHEUS_OTLP_ENDPOINT")
    if not spans_file or not endpoint:
        pytest.skip("ORPHEUS_SPANS_FILE / ORPHEUS_OTLP_ENDPOINT not set (scripts/test.sh sets them)")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
           "OTEL_SERVICE_NAME": "pipecat-example"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / "pipecat_to_wav.py"), "--server",
                           server_addr, "-o", str(tmp_path / "traced.wav")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    def linked():
        spans = [json.loads(line) for line in open(spans_file) if line.strip()]
        ours = {s["span_id"]: s for s in spans if s["name"] == "tts"
                and s["resource"].get("service.name") == "pipecat-example"}
        return ours, [s for s in spans if s["parent_id"] in ours
                      and s["name"] == "orpheus.tts.v1.TTSService/StreamingSynthesize"]
    deadline = time.monotonic() + 30
    while True:
        tts_spans, calls = linked()
        if calls or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert tts_spans, "the example exported no Pipecat tts span"
    assert calls, "no server call span is a child of the example's tts span"
    assert all(c["trace_id"] == tts_spans[c["parent_id"]]["trace_id"] for c in calls)
