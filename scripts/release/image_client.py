"""From outside the container (scripts/image-check.sh): wait for health SERVING, check that
GetStatus names this release, and run one Synthesize whose audio is whole frames.

    python image_client.py HOST:PORT VERSION
"""

from __future__ import annotations

import sys
import time

from orpheus_tts_client import Client, TTSError

FRAME = 2048  # samples per Orpheus audio frame


def _health(client: Client) -> str:
    try:
        return client.health(timeout=2)
    except TTSError as exc:  # the port is not open yet
        return exc.code.name


def main(addr: str, version: str) -> int:
    with Client(addr) as client:
        deadline = time.monotonic() + 600
        while (state := _health(client)) != "SERVING":
            if time.monotonic() > deadline:
                raise SystemExit(f"image_client: never SERVING (last: {state})")
            time.sleep(1)
        st = client.status()
        assert (st.server_version, st.api_version) == (version, "orpheus.tts.v1"), st
        result = client.synthesize("Hello from the container.", voice="tara")
    samples = len(result.audio) // 2
    assert samples > 0 and samples % FRAME == 0, samples
    print(f"image_client: SERVING, server {st.server_version} ({st.backend}), Synthesize "
          f"{samples} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
