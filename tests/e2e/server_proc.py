"""Start `orpheus-svc serve` as a real process on a free port, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, log_dir: Path, *settings: str, name: str = "server",
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.log_path = log_dir / f"{name}-{self.port}.log"
        args = [sys.executable, "-m", "orpheus_svc.app.cli", "serve", "--host", "127.0.0.1",
                "--port", str(self.port)]
        for s in settings:
            args += ["--set", s]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        # Reconnect fast: with grpc's default backoff (1 s and up) a check sent before the
        # port opened would blind the test to the short NOT_SERVING phase that follows.
        self.channel = grpc.insecure_channel(self.addr, options=[
            ("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 100)])

    def health(self, service: str = "", timeout: float = 2.0) -> int | None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout).status
        except grpc.RpcError:
            return None

    def wait_serving(self, timeout: float = 120.0, check_timeout: float = 2.0) -> list[int | None]:
        """Poll health until SERVING; returns the statuses seen on the way. A long
        `check_timeout` lets a check sent during model loading be answered however busy
        the machine is, instead of counting as no answer."""
        seen: list[int | None] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            status = self.health(timeout=check_timeout)
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == health_pb2.HealthCheckResponse.SERVING:
                return seen
            time.sleep(0.05)
        raise TimeoutError(f"server not SERVING after {timeout} s:\n{self.logs()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.channel.close()
        self._log.close()

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text()
