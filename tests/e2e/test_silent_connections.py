"""Connections that never speak are closed (issue 29): silent TCP connections and ones that
sent only the HTTP/2 preface, against a live server with small bounds
(server.handshake_timeout_seconds, server.max_connection_idle_seconds). They are closed
within bound + margin, the server's file descriptors return to their baseline, and normal
clients are served meanwhile, including one whose idle connection the server closed."""

import os
import select
import socket
import time

import grpc
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .server_proc import ServerProcess

HANDSHAKE_S, IDLE_S, MARGIN_S = 1.0, 2.0, 15.0
MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, stream 0
OPENERS = {"silent": (b"", 200),              # TCP only
           "magic": (MAGIC, 50),              # the preface's first half, no SETTINGS
           "preface": (MAGIC + EMPTY_SETTINGS, 50)}  # a whole client preface, then nothing


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_for(pred, timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return pred()


def reap_closed(socks: dict) -> None:
    """Drop from `socks` each socket the server has closed (EOF or reset); the server's
    SETTINGS and GOAWAY frames are read and ignored."""
    readable, _, _ = select.select(list(socks), [], [], 0.2)
    for s in readable:
        try:
            closed = s.recv(65536) == b""
        except ConnectionError:
            closed = True
        if closed:
            socks.pop(s)
            s.close()


def served(channel) -> bool:
    return len(tts_pb2_grpc.TTSServiceStub(channel).ListVoices(
        pb.ListVoicesRequest(), timeout=30).voices) > 0


@pytest.fixture
def bounded(tmp_path):
    # the sim backend: the gRPC edge is the real one, and it is up in a moment
    srv = ServerProcess(tmp_path, f"server.handshake_timeout_seconds={HANDSHAKE_S}",
                        f"server.max_connection_idle_seconds={IDLE_S}", "engine.backend=sim",
                        "server.drain_delay_seconds=0", name="silent")
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def test_silent_and_preface_only_connections_are_closed_and_fds_return(bounded):
    pid = bounded.proc.pid
    assert served(bounded.channel)
    time.sleep(IDLE_S + 1)  # that client's connection idles out: the baseline holds none
    baseline = fd_count(pid)

    socks: dict[socket.socket, str] = {}
    for kind, (opening, n) in OPENERS.items():
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", bounded.port), timeout=10)
            if opening:
                s.sendall(opening)
            socks[s] = kind
    opened = len(socks)
    # the server did accept (and hold) them: each is held at least the handshake bound
    assert wait_for(lambda: fd_count(pid) >= baseline + opened // 2, MARGIN_S, every=0.01)

    # a new client and the one whose connection the server closed for idleness are served
    with grpc.insecure_channel(bounded.addr) as fresh:
        assert served(fresh)
    assert served(bounded.channel)

    left = dict(socks)
    try:
        wait_for(lambda: (reap_closed(left), not left)[1], IDLE_S + MARGIN_S, every=0)
        assert len(left) == 0, f"still open after {IDLE_S + MARGIN_S} s: " \
            f"{sorted(set(left.values()))} ({len(left)} of {opened})"
    finally:
        for s in left:
            s.close()
    assert wait_for(lambda: fd_count(pid) <= baseline, IDLE_S + MARGIN_S), \
        f"server fds {fd_count(pid)}, baseline {baseline}"
