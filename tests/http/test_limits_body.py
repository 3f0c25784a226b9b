"""BoundedBody (http/limits.py) as plain ASGI, without a server: the body is read whole
within http.max_body_bytes, bounds included, before the app runs; a refusal is answered
with `Connection: close`, counted under its reason, and the app never sees the request;
an unknown caller is refused before its body is read. The helpers that read the head.
Complements tests/http/test_slow_clients.py, which drives a real server."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from orpheus_svc.config import load_config
from orpheus_svc.http.limits import BoundedBody, _content_length, _has_body, _peer, refused
from orpheus_svc.server.state import ServerState

LIMIT = 1024  # the smallest http.max_body_bytes the config takes


def make_state(**overrides):
    settings = {"http.max_body_bytes": LIMIT}
    settings.update(overrides)
    return ServerState(load_config(overrides=settings))


def scope_for(state, headers=(), kind="http", method="POST"):
    return {"type": kind, "method": method, "path": "/v1/audio/speech", "headers": list(headers),
            "query_string": b"", "app": SimpleNamespace(state=SimpleNamespace(server_state=state))}


class Client:
    """The server side of one request: what `receive` hands out, what `send` got."""

    def __init__(self, *messages, then=None):
        self.messages = list(messages)
        self.received = 0
        self.sent = []
        self.then = then  # awaited once the messages are used up (default: never returns)

    async def receive(self):
        self.received += 1
        if self.messages:
            return self.messages.pop(0)
        if self.then is not None:
            return await self.then()
        await asyncio.Event().wait()

    async def send(self, message):
        self.sent.append(message)

    def answer(self):
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        return start["status"], dict(start["headers"]), json.loads(body)


class App:
    def __init__(self):
        self.calls = []

    async def __call__(self, scope, receive, send):
        first = await receive()
        self.calls.append((scope, first))


def chunk(data, more=False):
    return {"type": "http.request", "body": data, "more_body": more}


def run(state, scope, client, app=None):
    app = app or App()
    asyncio.run(BoundedBody(app, state)(scope, client.receive, client.send))
    return app


def length(n):
    return (b"content-length", str(n).encode())


def test_a_body_of_exactly_the_limit_in_chunks_reaches_the_app_whole_then_receive_is_the_servers():
    state = make_state()
    later = {"type": "http.disconnect"}

    async def then():
        return later

    half = b"x" * (LIMIT // 2)
    client = Client(chunk(half, True), chunk(b"", True), chunk(half), then=then)

    class Twice(App):
        async def __call__(self, scope, receive, send):
            self.calls.append((await receive(), await receive()))

    app = run(state, scope_for(state, [length(LIMIT)]), client, Twice())
    assert app.calls == [({"type": "http.request", "body": half + half, "more_body": False},
                          later)]
    assert client.sent == [] and sum(state.http_refused.values()) == 0


def test_a_declared_length_over_the_limit_is_413_before_any_byte_is_read():
    state = make_state()
    client = Client(chunk(b"x" * (LIMIT + 1)))
    app = run(state, scope_for(state, [length(LIMIT + 1)]), client)
    assert app.calls == [] and client.received == 0
    status, headers, body = client.answer()
    assert status == 413 and headers[b"connection"] == b"close"
    assert body["error"]["message"] == ("the request body is larger than this server's limit "
                                        f"of {LIMIT} bytes (http.max_body_bytes)")
    assert state.http_refused == {"body_too_large": 1}


def test_a_body_that_grows_past_the_limit_is_413_and_the_rest_is_never_read():
    state = make_state()
    client = Client(chunk(b"x" * LIMIT, True), chunk(b"y", True), chunk(b"z"))
    app = run(state, scope_for(state, [(b"transfer-encoding", b"chunked")]), client)
    assert app.calls == [] and client.received == 2
    status, headers, _ = client.answer()
    assert status == 413 and headers[b"connection"] == b"close"
    assert state.http_refused == {"body_too_large": 1}


def test_a_content_length_of_more_than_20_digits_is_too_large_and_a_malformed_one_is_none():
    assert _content_length({"headers": [length(10 ** 25)]}) == 1 << 70
    assert _content_length({"headers": [length(10 ** 20)]}) == 1 << 70  # 21 digits
    assert _content_length({"headers": [(b"content-length", b"9" * 20)]}) == int("9" * 20)
    assert _content_length({"headers": [(b"host", b"x"), length(7)]}) == 7
    assert _content_length({"headers": [(b"content-length", b"seven")]}) is None
    assert _content_length({"headers": []}) is None and _content_length({}) is None


def test_a_body_is_one_with_a_length_above_zero_or_any_transfer_encoding():
    assert _has_body({"headers": []}, 1)
    assert not _has_body({"headers": []}, 0)
    assert not _has_body({"headers": []}, None)
    assert not _has_body({}, None)
    assert _has_body({"headers": [(b"transfer-encoding", b"chunked")]}, None)
    assert not _has_body({"headers": [(b"host", b"transfer-encoding")]}, None)


def test_a_client_that_leaves_during_its_body_is_neither_answered_nor_counted():
    state = make_state()
    client = Client(chunk(b"12", True), {"type": "http.disconnect"})
    app = run(state, scope_for(state, [length(5)]), client)
    assert app.calls == [] and client.sent == [] and sum(state.http_refused.values()) == 0


def test_a_body_that_never_comes_is_408_naming_the_setting():
    state = make_state(**{"http.body_timeout_seconds": 0.05})
    client = Client(chunk(b"12", True))  # then nothing, ever
    app = run(state, scope_for(state, [length(5)]), client)
    assert app.calls == []
    status, headers, body = client.answer()
    assert status == 408 and headers[b"connection"] == b"close"
    assert body["error"]["message"] == \
        "the request body did not arrive within 0.05 s (http.body_timeout_seconds)"
    assert body["error"]["code"] == "deadline_exceeded"
    assert state.http_refused == {"body_timeout": 1}


def test_with_no_body_timeout_a_body_that_takes_its_time_is_read():
    """body_timeout_seconds 0 = no bound: each receive is awaited as long as it takes (here
    a few turns of the loop, which a deadline of 'now' would not wait for)."""
    state = make_state(**{"http.body_timeout_seconds": 0})
    parts = [chunk(b"12", True), chunk(b"3")]

    async def then():
        for _ in range(3):
            await asyncio.sleep(0)
        return parts.pop(0)

    client = Client(then=then)
    app = run(state, scope_for(state, [length(3)]), client)
    assert [first["body"] for _, first in app.calls] == [b"123"]
    assert client.sent == []


def test_an_unknown_caller_is_refused_before_its_body_is_read():
    state = make_state()
    state.auth = SimpleNamespace(
        unauthenticated_total=0,
        store=SimpleNamespace(authenticate=lambda header: SimpleNamespace(key=None,
                                                                          error="no such key")))
    for headers in ([length(5)], [(b"transfer-encoding", b"chunked")], [length(LIMIT + 1)]):
        client = Client(chunk(b"12345"))
        app = run(state, scope_for(state, headers), client)
        assert app.calls == [] and client.received == 0
        status, headers_out, body = client.answer()
        assert status == 401 and headers_out[b"connection"] == b"close"
        assert body["error"]["message"] == "no such key"
    assert state.auth.unauthenticated_total == 3
    assert sum(state.http_refused.values()) == 0  # counted by authenticate, not as a bound
    # no body: the route authenticates (and answers) itself
    client = Client(chunk(b""))
    assert len(run(state, scope_for(state, [length(0)], method="GET"), client).calls) == 1


@pytest.mark.parametrize("kind", ["websocket", "lifespan"])
def test_what_is_not_an_http_request_goes_to_the_app_untouched(kind):
    state = make_state()
    message = {"type": f"{kind}.connect"}
    client = Client(message)
    app = run(state, scope_for(state, [length(LIMIT + 1)], kind=kind), client)
    assert app.calls[0][1] is message and client.sent == []


def test_refused_counts_each_reason_and_a_peer_is_host_and_port():
    state = make_state()
    refused(state, "head_timeout", client="1.2.3.4:5")
    refused(state, "head_timeout")
    refused(state, "pending_connections")
    assert state.http_refused == {"head_timeout": 2, "pending_connections": 1}
    assert _peer(("1.2.3.4", 5)) == "1.2.3.4:5" and _peer(None) == "" and _peer(()) == ""


class Log:
    def __init__(self):
        self.lines = []

    def info(self, event, **fields):
        self.lines.append((event, fields))

    debug = info


@pytest.fixture
def logged(monkeypatch):
    from orpheus_svc.http import limits
    log = Log()
    monkeypatch.setattr(limits, "log", log)
    return log.lines


def test_each_refusal_and_a_client_leaving_is_logged_once_with_where_and_how_much(logged):
    state = make_state(**{"http.body_timeout_seconds": 0.05})
    run(state, scope_for(state, [length(LIMIT + 1)]), Client())
    run(state, scope_for(state, [length(LIMIT)]), Client(chunk(b"x" * 7, True)))
    run(state, scope_for(state, [(b"transfer-encoding", b"chunked")]),
        Client(chunk(b"x" * (LIMIT + 1), True)))
    run(state, scope_for(state, [length(5)]), Client(chunk(b"12", True),
                                                     {"type": "http.disconnect"}))
    path = "/v1/audio/speech"
    assert logged == [
        ("http request refused", {"reason": "body_too_large", "path": path,
                                  "content_length": LIMIT + 1}),
        ("http request refused", {"reason": "body_timeout", "path": path,
                                  "received_bytes": 7}),
        ("http request refused", {"reason": "body_too_large", "path": path,
                                  "received_bytes": LIMIT + 1}),
        ("client left", {"path": path, "while_": "reading the request body",
                         "received_bytes": 2}),
    ]
