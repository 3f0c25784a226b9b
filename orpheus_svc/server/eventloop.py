"""Which asyncio event loop a serving process runs: `server.event_loop`.

uvloop (libuv, written in Cython) runs the same asyncio programs with less interpreter
work per callback, and a loaded server is mostly callbacks: every gRPC message is a write
whose completion resumes a coroutine. gRPC's asyncio stack runs on any asyncio loop.
"auto" uses it when installed (the server extra installs it where it builds: Linux and
macOS) and asyncio's own loop otherwise; "uvloop" refuses to start without it; "asyncio"
never uses it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine


class EventLoopUnavailable(RuntimeError):
    """server.event_loop names a loop that is not installed."""


def loop_name(choice: str) -> str:
    """The loop `choice` (auto | uvloop | asyncio) resolves to here: uvloop or asyncio."""
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise EventLoopUnavailable(
                "server.event_loop is uvloop but uvloop is not installed: pip install uvloop "
                "(Linux, macOS), or set server.event_loop=auto or asyncio") from None
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, int], choice: str) -> int:
    """asyncio.run(main) on the loop `choice` resolves to."""
    if loop_name(choice) == "uvloop":
        import uvloop
        return uvloop.run(main)
    return asyncio.run(main)
