"""Run inside the fresh virtual environment that holds only the wheels (scripts/wheel-smoke.sh):
the packages import from that environment, the demo server it started turns SERVING and
reports its version, and the HTTP edge answers a speech request and serves the playground.

    python smoke_client.py VENV GRPC_ADDR HTTP_PORT SERVER_VERSION
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import orpheus_svc
import orpheus_svc.app.server  # noqa: F401  (the server extra's modules import)
import orpheus_tts_client
from orpheus_tts_client import Client, TTSError


def _health(client: Client) -> str:
    try:
        return client.health(timeout=2)
    except TTSError as exc:
        return exc.code.name


def main(venv: str, addr: str, http_port: str, version: str) -> int:
    root = Path(venv).resolve()
    for module in (orpheus_svc, orpheus_tts_client):
        where = Path(module.__file__).resolve()
        assert root in where.parents, f"{module.__name__} imported from {where}, not {root}"
        print(f"smoke: {module.__name__} {module.__version__} from {where.parent}")
    with Client(addr) as client:
        deadline = time.monotonic() + 300
        while _health(client) != "SERVING":  # the port opens once the process has started
            assert time.monotonic() < deadline, "the server never turned SERVING"
            time.sleep(0.5)
        st = client.status()
    assert (st.server_version, st.api_version) == (version, "orpheus.tts.v1"), st
    print(f"smoke: GetStatus server_version={st.server_version} api={st.api_version} "
          f"backend={st.backend}")
    base = f"http://127.0.0.1:{http_port}"
    body = json.dumps({"model": "orpheus", "input": "Hello there.", "voice": "tara",
                       "response_format": "wav"}).encode()
    req = urllib.request.Request(f"{base}/v1/audio/speech", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        wav = resp.read()
    assert wav[:4] == b"RIFF" and len(wav) > 44 + 2048 * 2, wav[:64]
    with urllib.request.urlopen(f"{base}/", timeout=30) as resp:
        page = resp.read().decode()
    assert "<html" in page.lower(), page[:200]
    print(f"smoke: HTTP speech {len(wav)} bytes of WAV; playground page {len(page)} chars")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
