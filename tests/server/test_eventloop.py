"""server.event_loop: which asyncio loop a serving process runs (server/eventloop.py)."""

import asyncio
import sys

import pytest

from orpheus_svc.config import ConfigError, load_config
from orpheus_svc.server import eventloop

uvloop = pytest.importorskip("uvloop")  # the server extra installs it on Linux and macOS


async def _loop_module():
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_auto_and_uvloop_run_uvloop_asyncio_runs_asyncio():
    assert eventloop.run(_loop_module(), "auto") == "uvloop"
    assert eventloop.run(_loop_module(), "uvloop") == "uvloop"
    assert eventloop.run(_loop_module(), "asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert eventloop.loop_name("auto") == "asyncio"
    assert eventloop.run(_loop_module(), "auto") == "asyncio"
    with pytest.raises(eventloop.EventLoopUnavailable, match="server.event_loop is uvloop"):
        eventloop.loop_name("uvloop")


def test_an_unknown_loop_is_a_config_error():
    with pytest.raises(ConfigError, match="server.event_loop must be auto, uvloop or asyncio"):
        load_config(environ={}, overrides={"server.event_loop": "trio"})
