"""Slow, silent and oversized HTTP clients are each ended within their configured bound
(conftest.BOUNDS: 2 s each), counted, and leave no descriptor behind (issue 27: before,
none of them was ever ended). Raw sockets, so nothing in a client library helps."""

import json
import os
import select
import socket
import time

import httpx
import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from orpheus_svc.http.limits import BoundedWebSocket

from .conftest import BOUNDS

BOUND = 2.0  # each http.* time bound in BOUNDS
MARGIN = 8.0  # a loaded CI machine's scheduling, on top of the bound
HEAD = ("POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        "Content-Length: {length}\r\n\r\n")
BODY = json.dumps({"model": "tts-1", "input": "Hi.", "voice": "tara", "response_format": "pcm"})


def open_socket(srv) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    sock.settimeout(BOUND + MARGIN)
    return sock


def read_until_closed(sock) -> bytes:
    """Everything the server sends until it closes (a timeout here fails the test)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def status_and_body(response: bytes):
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head.lower(), body


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))  # the server runs in this process


def wait_for(predicate, timeout=BOUND + MARGIN):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def refused(srv, reason):
    return srv.server.state.http_refused[reason]


def test_a_body_sent_one_byte_at_a_time_gets_408_within_the_bound(bounded, error_logs):
    before = refused(bounded, "body_timeout")
    with open_socket(bounded) as sock:
        sock.sendall(HEAD.format(length=len(BODY)).encode())
        sent, response = 0, b""
        started = time.monotonic()
        while time.monotonic() - started < BOUND + MARGIN:
            if sent < len(BODY):
                sock.sendall(BODY[sent].encode())  # 5 bytes/s: the body needs ~20 s
                sent += 1
            if select.select([sock], [], [], 0.2)[0]:
                response = read_until_closed(sock)
                break
    status, head, body = status_and_body(response)
    assert status == 408 and b"connection: close" in head
    assert json.loads(body)["error"]["code"] == "deadline_exceeded"
    assert sent < len(BODY)  # answered before the body was complete
    assert refused(bounded, "body_timeout") == before + 1
    assert error_logs == []


def test_a_body_that_never_comes_gets_408_within_the_bound(bounded, error_logs):
    with open_socket(bounded) as sock:
        sock.sendall(HEAD.format(length=100).encode())
        status, _, body = status_and_body(read_until_closed(sock))
    assert status == 408 and "http.body_timeout_seconds" in json.loads(body)["error"]["message"]
    assert error_logs == []


def test_a_body_declared_larger_than_the_limit_is_413_before_it_is_read(bounded, error_logs):
    before = refused(bounded, "body_too_large")
    with open_socket(bounded) as sock:
        sock.sendall(HEAD.format(length=100_000_000).encode() + b"x" * 1024)
        # the other 99.99 MB never come: an answer at all means it was not waited for
        status, head, body = status_and_body(read_until_closed(sock))
    assert status == 413 and b"connection: close" in head
    assert "http.max_body_bytes" in json.loads(body)["error"]["message"]
    assert refused(bounded, "body_too_large") == before + 1
    assert error_logs == []


def test_a_chunked_body_past_the_limit_is_413(bounded, error_logs):
    head = ("POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"  # 16 KiB each; the bound is 64 KiB
    with open_socket(bounded) as sock:
        sock.sendall(head)
        try:
            for _ in range(8):
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        status, _, _ = status_and_body(read_until_closed(sock))
    assert status == 413
    assert error_logs == []


def test_half_sent_heads_and_silent_connections_are_closed_and_their_fds_freed(bounded):
    sock = open_socket(bounded)  # warm: lazily opened descriptors (selectors) exist now
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
    assert status_and_body(read_until_closed(sock))[0] == 200
    sock.close()
    baseline = fds()
    before = refused(bounded, "head_timeout")
    n = 30  # under http.max_pending_connections (40)
    clients = [open_socket(bounded) for _ in range(n)]
    for i, client in enumerate(clients):
        if i % 3:  # two in three send half a head; the rest send nothing at all
            client.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: te")
    try:
        for client in clients:  # each ends within the bound (a timeout raises)
            assert read_until_closed(client) == b""
        # the clients still hold their ends: the server's are closed
        assert wait_for(lambda: fds() <= baseline + n)
        assert refused(bounded, "head_timeout") == before + n
    finally:
        for client in clients:
            client.close()
    assert wait_for(lambda: fds() <= baseline)


def read_one_response(sock) -> tuple[int, bytes]:
    """One response with a Content-Length off a kept-alive connection: (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "closed before a whole response head"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed before a whole response body"
        body += chunk
    return int(head.split(b" ")[1]), body


def test_half_a_second_head_on_a_kept_alive_connection_is_closed_within_the_bound(
        bounded, error_logs):
    """The head timer starts again with the next request on a kept-alive connection.
    Caught planted bug: dropping it (data_received no longer calling _await_head) left a
    connection that sent half its second head open for ever (past the socket timeout)."""
    before = refused(bounded, "head_timeout")
    with open_socket(bounded) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: test\r\n\r\n")  # keep-alive
        assert read_one_response(sock)[0] == 200
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: te")
        started = time.monotonic()
        assert read_until_closed(sock) == b""  # a timeout here is the bug
    assert time.monotonic() - started < BOUND + MARGIN
    assert refused(bounded, "head_timeout") == before + 1
    assert error_logs == []


def padded(length: int, voice: str = "alloy") -> bytes:
    """A speech request of exactly `length` bytes (JSON padded with spaces) whose voice
    is refused by the route: a 400 naming the voice proves the body was read whole."""
    body = json.dumps({"model": "tts-1", "input": "Hi.", "voice": voice,
                       "response_format": "pcm"}).encode()
    return body + b" " * (length - len(body))


def test_a_body_of_exactly_max_body_bytes_is_read_and_one_byte_more_is_413(
        bounded, error_logs):
    """http.max_body_bytes is the largest body accepted, by Content-Length and by a chunked
    body's count alike. Caught planted bug: `>` -> `>=` (a body of exactly the limit was
    refused 413)."""
    limit = BOUNDS["http.max_body_bytes"]
    url = f"{bounded.http}/v1/audio/speech"
    headers = {"content-type": "application/json"}

    def chunked(body):  # an iterator: httpx sends it chunked, without a Content-Length
        yield from (body[i:i + 4096] for i in range(0, len(body), 4096))

    for content in (padded(limit), chunked(padded(limit))):
        r = httpx.post(url, content=content, headers=headers, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text[:200]
    for content in (padded(limit + 1), chunked(padded(limit + 1))):
        r = httpx.post(url, content=content, headers=headers, timeout=60)
        assert r.status_code == 413 and "http.max_body_bytes" in r.text
    assert error_logs == []


def test_connections_past_the_pending_cap_are_closed_at_once(bounded):
    cap = BOUNDS["http.max_pending_connections"]
    before = refused(bounded, "pending_connections")
    clients = [open_socket(bounded) for _ in range(cap + 5)]
    try:
        assert wait_for(lambda: refused(bounded, "pending_connections") == before + 5)
        for client in clients:
            assert read_until_closed(client) == b""  # the 5 at once, the rest at the bound
    finally:
        for client in clients:
            client.close()
    # the cap counts only connections still waiting: a request goes through afterwards
    with open_socket(bounded) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        assert status_and_body(read_until_closed(sock))[0] == 200


def ws_url(srv):
    return srv.http.replace("http://", "ws://") + "/v1/audio/speech/stream"


def active_sessions(srv):
    return tts_pb2_grpc.TTSServiceStub(srv.channel).GetStatus(pb.GetStatusRequest()).active_sessions


def test_a_websocket_that_never_sends_its_config_is_counted_then_ended(bounded, error_logs):
    before = refused(bounded, "ws_config_timeout")
    assert active_sessions(bounded) == 0  # and the gRPC channel used below is connected
    baseline = fds()
    with connect(ws_url(bounded), open_timeout=30) as ws:
        # open from the moment it was accepted; GetStatus counts it before its config
        assert wait_for(lambda: active_sessions(bounded) == 1)
        event = json.loads(ws.recv(timeout=BOUND + MARGIN))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=BOUND + MARGIN)
    assert event["type"] == "error" and event["code"] == "DEADLINE_EXCEEDED"
    assert "http.ws_config_timeout_seconds" in event["message"]
    assert ws.close_code == 1008
    assert refused(bounded, "ws_config_timeout") == before + 1
    assert wait_for(lambda: active_sessions(bounded) == 0)
    assert wait_for(lambda: fds() <= baseline)
    assert error_logs == []


def test_a_websocket_idle_after_some_text_gets_its_summary_then_the_timeout_error(
        bounded, error_logs):
    events = []
    with connect(ws_url(bounded), open_timeout=30) as ws:
        ws.send(json.dumps({"type": "config", "seed": 1}))
        ws.send(json.dumps({"type": "text", "text": "Hello"}))  # no sentence end
        with pytest.raises(ConnectionClosed):
            while True:  # audio, then the events; the idle timeout (2 s) ends it
                message = ws.recv(timeout=120)
                if isinstance(message, str):
                    events.append(json.loads(message))
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["summary", "error"]  # what was sent was spoken, then why it ended
    assert events[-1]["code"] == "DEADLINE_EXCEEDED"
    assert "session.idle_timeout_seconds" in events[-1]["message"]
    assert ws.close_code == 1008
    assert error_logs == []


def test_a_client_leaving_during_its_body_is_not_an_error(bounded, error_logs):
    with open_socket(bounded) as sock:
        sock.sendall(HEAD.format(length=len(BODY)).encode() + BODY[:10].encode())
    # the server notices at once (EOF) and logs "client left" at info; nothing at error
    time.sleep(0.5)  # let the loop see the EOF (no bound on the server is measured here)
    assert error_logs == []
    with open_socket(bounded) as sock:  # and serves on
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        assert status_and_body(read_until_closed(sock))[0] == 200


def shrink_send_buffers(srv):
    """Give the server's WebSocket connections the buffers of a slow network path.

    On loopback the kernel buffers about 4 MB behind a client that reads nothing, which
    the CPU demo model needs half a minute to fill; with small buffers on the server's
    socket the stalled-consumer timeout is reached in seconds. Nothing else changes."""
    for protocol in list(srv.server.http._server.server_state.connections):
        transport = getattr(protocol, "transport", None)
        if transport is None or transport.is_closing():
            continue
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        transport.set_write_buffer_limits(high=16 * 1024)


def test_a_websocket_that_stops_reading_gets_the_error_event_and_close_behind_its_audio(
        bounded, error_logs):
    before = bounded.server.state.timeouts["stalled"]
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", bounded.http_port))
    long_text = " ".join(["This sentence goes on for quite a while, so it cannot end soon."] * 6)
    # max_queue: the client library stops reading the socket after 2 unread frames
    with connect(ws_url(bounded), sock=client, open_timeout=30, max_queue=2) as ws:
        ws.send(json.dumps({"type": "config", "sample_rate": 48000, "seed": 3}))
        bounded.loop.call_soon_threadsafe(shrink_send_buffers, bounded)
        ws.send(json.dumps({"type": "text", "text": long_text}))
        ws.send(json.dumps({"type": "end"}))
        # read nothing until the watchdog has cut the call
        assert wait_for(lambda: bounded.server.state.timeouts["stalled"] == before + 1,
                        timeout=120)
        events = []
        with pytest.raises(ConnectionClosed):
            while True:
                message = ws.recv(timeout=BOUND + MARGIN)
                if isinstance(message, str):
                    events.append(json.loads(message))
    assert events[-1]["type"] == "error" and events[-1]["code"] == "DEADLINE_EXCEEDED"
    assert "session.stalled_consumer_timeout_seconds" in events[-1]["message"]
    assert ws.close_code == 1008
    assert wait_for(lambda: active_sessions(bounded) == 0)
    assert error_logs == []


def test_a_websocket_that_never_reads_again_is_aborted_when_its_close_times_out(
        bounded, error_logs):
    """The path the test above never takes, because it reads in the end: the client reads
    nothing, ever. The error event and close frame then sit behind the unread audio, and
    when the close handshake times out with bytes still unsent the server aborts the
    connection (limits.BoundedWebSocket._close_or_abort): its socket is freed, though the
    client still holds its end. The close timeout (uvicorn's 10 s) is shortened to 0.5 s on
    this one connection. Caught planted bug: a plain close() there, which waits for the
    client to read the buffered bytes, for ever."""
    before = bounded.server.state.timeouts["stalled"]
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", bounded.http_port))
    long_text = " ".join(["This sentence goes on for quite a while, so it cannot end soon."] * 6)
    server_side = []

    def shrink_and_hurry():
        known = set(srv_connections(bounded))
        shrink_send_buffers(bounded)
        for protocol in known:
            if isinstance(protocol, BoundedWebSocket):
                protocol.close_timeout = 0.5
                server_side.append(protocol)

    with connect(ws_url(bounded), sock=client, open_timeout=30, max_queue=2) as ws:
        ws.send(json.dumps({"type": "config", "sample_rate": 48000, "seed": 3}))
        bounded.loop.call_soon_threadsafe(shrink_and_hurry)
        ws.send(json.dumps({"type": "text", "text": long_text}))
        ws.send(json.dumps({"type": "end"}))
        assert wait_for(lambda: bounded.server.state.timeouts["stalled"] == before + 1,
                        timeout=120)
        assert len(server_side) == 1
        # still reading nothing: the server gives the connection up on its own
        assert wait_for(lambda: server_side[0] not in srv_connections(bounded),
                        timeout=0.5 + MARGIN)
        assert server_side[0].transport.is_closing()
        with pytest.raises(ConnectionClosed):
            while True:
                ws.recv(timeout=BOUND + MARGIN)
    assert ws.close_code == 1006  # aborted: the close frame never went out
    assert wait_for(lambda: active_sessions(bounded) == 0)
    assert error_logs == []


def srv_connections(srv) -> set:
    return set(srv.server.http._server.server_state.connections)
