"""Plugin tests run with the real voice-agent frameworks against a live server.

They need the framework (pipecat-ai / livekit-agents, which the main dev venv does not have:
scripts/test-client-compat.sh installs each in a fresh venv) and ORPHEUS_SERVER_ADDR (a
running server; scripts/test.sh starts the demo model). Without them the tests skip, unless
ORPHEUS_REQUIRE_PLUGIN_TESTS=1, which turns a skip into a failure (CI sets it).
"""

import importlib
import os

import pytest


def require(module: str):
    """Import the framework module, or skip (fail under ORPHEUS_REQUIRE_PLUGIN_TESTS=1)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("ORPHEUS_REQUIRE_PLUGIN_TESTS") == "1":
            raise
        pytest.skip(f"{module} is not installed ({e}); scripts/test-client-compat.sh runs this",
                    allow_module_level=True)


@pytest.fixture(scope="session")
def server_addr() -> str:
    addr = os.environ.get("ORPHEUS_SERVER_ADDR", "")
    if not addr:
        if os.environ.get("ORPHEUS_REQUIRE_PLUGIN_TESTS") == "1":
            pytest.fail("ORPHEUS_SERVER_ADDR is not set")
        pytest.skip("ORPHEUS_SERVER_ADDR is not set (a running orpheus-svc server)")
    return addr
