"""Certificates and key files made at test time, and a server process speaking TLS."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orpheus_svc.security.keys import hash_key
from tests.e2e.server_proc import ServerProcess

from .certs import CA

KEY_A = "ok_test-key-alpha"
KEY_B = "ok_test-key-beta"


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    out = tmp_path_factory.mktemp("pki")
    ca = CA(out)
    other = CA(out, "other CA")
    return {
        "dir": out, "ca": ca, "other_ca": other,
        "server": ca.issue("server", ["localhost", "127.0.0.1"]),
        "client": ca.issue("client", ["client-a"], client=True),
        "stranger": other.issue("stranger", ["client-x"], client=True),
        "expired": ca.issue("expired", ["localhost", "127.0.0.1"], expired=True),
        "wrong_host": ca.issue("wrong-host", ["elsewhere.example"]),
        "rotated": other.issue("rotated", ["localhost", "127.0.0.1"]),
    }


def write_keys(path, *entries) -> None:
    lines = ["keys:"]
    for name, key, conc, per_min in entries:
        lines += [f"  - name: {name}", f"    sha256: {hash_key(key)}",
                  f"    max_concurrent_sessions: {conc}", f"    sessions_per_minute: {per_min}"]
    path.write_text("\n".join(lines) + "\n")


def tls_channel(addr: str, ca_pem: bytes, client=None, server_name: str | None = None):
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca_pem,
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None)
    opts = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(addr, creds, options=opts)


def health(channel, timeout: float = 5.0):
    try:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                         timeout=timeout).status
    except grpc.RpcError as exc:
        return exc


class TlsServer(ServerProcess):
    """ServerProcess whose own channel speaks TLS (trusting `ca_pem`, with `client` for mTLS)."""

    def __init__(self, log_dir, *settings, ca_pem: bytes, client=None, name="tls") -> None:
        super().__init__(log_dir, *settings, name=name)
        self.channel.close()
        self.ca_pem, self.client = ca_pem, client
        self.channel = self.connect()

    def connect(self, **kw):
        return tls_channel(self.addr, kw.get("ca_pem", self.ca_pem), kw.get("client", self.client))

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Until the port is open (the 'listening' log line is written after the bind)."""
        deadline = time.monotonic() + timeout
        while "listening" not in self.logs():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server not listening:\n{self.logs()}")
            time.sleep(0.05)

    def wait_serving(self, timeout: float = 120.0, check_timeout: float = 2.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            if health(self.channel, check_timeout) == health_pb2.HealthCheckResponse.SERVING:
                return
            time.sleep(0.1)
        raise TimeoutError(f"server not SERVING after {timeout} s:\n{self.logs()}")
