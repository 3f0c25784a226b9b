"""The client on protobuf's pure-Python implementation (issue 29 item 6):
PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python is what some platforms and sandboxes run
(no upb wheel), and the implementation is chosen once per process, so the check runs in a
fresh interpreter: import, a health check and a streamed session against the fake server."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
from google.protobuf.internal import api_implementation
assert api_implementation.Type() == "python", api_implementation.Type()
from orpheus_tts_client import FLUSH, Client, Summary
from orpheus_tts_client import _health
from tests.clients.fake_server import FakeServer

assert _health.status_name(_health.HealthCheckResponse(status=1).SerializeToString()) == "SERVING"
server = FakeServer("pure").start()
try:
    with Client(server.target) as tts:
        assert tts.health() == "SERVING"
        events = list(tts.stream(["Hel", "lo there. ", FLUSH, "Bye."], voice="tara"))
        assert isinstance(events[-1], Summary) and events[-1].num_segments == 2, events[-1]
finally:
    server.stop()
print("ok")
"""


def test_the_client_works_on_the_pure_python_protobuf():
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clients/python/src"),
                                          os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
