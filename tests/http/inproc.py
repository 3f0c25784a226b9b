"""The real `Server` (gRPC + HTTP edges, one Runtime) in this process, on its own loop thread.

In-process rather than a subprocess for one reason: the tests compare the audio of two
requests with the same seed (PCM against each encoding), which needs a deterministic
pipeline. The demo model's tokens are deterministic per seed, but SNAC's noise blocks draw
fresh noise per decode window (0 dB between two runs of the random-init codec), so once
the model has loaded the fixture turns the codec's noise off. Everything else is as served.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import grpc

from orpheus_svc.config import load_config
from orpheus_svc.app.server import Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcessServer:
    def __init__(self, **overrides) -> None:
        self.port = free_port()
        self.http_port = free_port()
        settings = {"server.host": "127.0.0.1", "server.port": self.port,
                    "server.http_port": self.http_port, "server.drain_delay_seconds": 0,
                    "server.grace_seconds": 2, "server.log_level": "warning", **overrides}
        self.config = load_config(overrides=settings)
        self.addr = f"127.0.0.1:{self.port}"
        self.http = f"http://127.0.0.1:{self.http_port}"
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="test-server", daemon=True)
        self.server: Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self.server = Server(self.config)
            await self.server.start()
            await self.server.load()
            self.server.state.runtime.flusher.codec.noise = False  # see the module docstring
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()
            raise
        self._ready.set()
        await self._stop.wait()
        await self.server.shutdown()

    def start(self, timeout: float = 180) -> "InProcessServer":
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("server did not load")
        if self._error is not None:
            raise RuntimeError(f"server failed to start: {self._error!r}")
        self.channel = grpc.insecure_channel(self.addr)
        return self

    def stop(self) -> None:
        self.channel.close()
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
