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
