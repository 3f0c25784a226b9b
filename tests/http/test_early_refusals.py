"""An answer given before the request body was read reaches the client (issue 36).

The edge refuses an oversized body by its Content-Length (413), a caller without a key
before its body (401), and a body too slow (408). It used to close the socket at once with
the body unread: the kernel's RST then lost the answer, and the official openai SDK saw
APIConnectionError, async httpx ReadError. Now the connection lingers (orpheus_svc/http/
linger.py): write side shut, the rest of the body read and thrown away, within
http.linger_seconds and http.linger_max_bytes. Real clients, unmodified, against a real
server process, whose peak memory must not follow the bodies' size.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import openai
import pytest

from orpheus_svc.security.keys import hash_key
from tests.e2e.server_proc import ServerProcess, free_port

KEY = "ok_linger-key"
MB = 1 << 20
SIZES = (2 * MB, 10 * MB, 100 * MB)  # all over the default http.max_body_bytes (1 MiB)
BODY_TIMEOUT, LINGER = 1.0, 2.0
MARGIN = 8.0  # a loaded CI machine's scheduling, on top of a bound
LINGER_MAX_BYTES = 256 * MB  # the default http.linger_max_bytes
# The server's peak RSS may grow this much over all the tests; a body kept in memory
# (100 MB) would pass it
MEMORY_SLACK = 48 * MB


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    keys = json.dumps({"keys": [{"name": "test", "sha256": hash_key(KEY)}]})
    http_port = free_port()
    server = ServerProcess(tmp_path_factory.mktemp("linger"), "engine.backend=sim",
                           f"server.http_port={http_port}", f"server.api_keys={keys}",
                           f"http.body_timeout_seconds={BODY_TIMEOUT}",
                           f"http.linger_seconds={LINGER}", name="linger")
    server.http_port = http_port
    server.url = f"http://127.0.0.1:{http_port}/v1"
    try:
        server.wait_serving()
        # warm: the first requests import and allocate what every later one reuses
        for _ in range(2):
            httpx.post(f"{server.url}/audio/speech", content=b"{}", timeout=30,
                       headers={"Authorization": f"Bearer {KEY}",
                                "Content-Type": "application/json"})
        server.baseline_hwm = peak_rss(server)
        yield server
    finally:
        server.stop()


def peak_rss(server) -> int:
    """The server process's peak resident memory (VmHWM), in bytes."""
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def speech_body(size: int) -> bytes:
    """A JSON speech request of `size` bytes (its input is the padding)."""
    head = b'{"model": "tts-1", "voice": "tara", "input": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def check_error(status: int, payload: dict, want: int) -> None:
    assert status == want, (status, payload)
    err = payload["error"]
    if want == 413:
        assert err["code"] == "resource_exhausted" and "http.max_body_bytes" in err["message"]
    else:
        assert err["type"] == "authentication_error" and err["code"] == "unauthenticated"


def test_httpx_gets_the_413_of_an_oversized_body_sync_and_async(srv):
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    with httpx.Client(timeout=60) as client:
        for size in SIZES:
            r = client.post(f"{srv.url}/audio/speech", content=speech_body(size), headers=headers)
            check_error(r.status_code, r.json(), 413)
            assert r.headers["connection"] == "close"

    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            for size in SIZES:  # ReadError here before the lingering close
                r = await client.post(f"{srv.url}/audio/speech", content=speech_body(size),
                                      headers=headers)
                check_error(r.status_code, r.json(), 413)

    asyncio.run(main())
    assert peak_rss(srv) - srv.baseline_hwm < MEMORY_SLACK


def test_the_openai_sdk_gets_the_413_of_an_oversized_input_sync_and_async(srv):
    def check(exc_info):
        err = exc_info.value
        check_error(err.status_code, err.response.json(), 413)

    client = openai.OpenAI(base_url=srv.url, api_key=KEY, max_retries=0, timeout=60)
    for size in SIZES:
        with pytest.raises(openai.APIStatusError) as exc_info:
            client.audio.speech.create(model="tts-1", voice="tara", input="x" * size)
        check(exc_info)

    async def main():
        aclient = openai.AsyncOpenAI(base_url=srv.url, api_key=KEY, max_retries=0, timeout=60)
        for size in SIZES:  # APIConnectionError here before the lingering close
            with pytest.raises(openai.APIStatusError) as exc_info:
                await aclient.audio.speech.create(model="tts-1", voice="tara", input="x" * size)
            check(exc_info)
        await aclient.close()

    asyncio.run(main())
    assert peak_rss(srv) - srv.baseline_hwm < MEMORY_SLACK


def test_a_big_body_without_a_key_gets_401_before_it_is_read(srv):
    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            return await client.post(f"{srv.url}/audio/speech", content=speech_body(10 * MB),
                                     headers={"Content-Type": "application/json"})

    r = asyncio.run(main())
    check_error(r.status_code, r.json(), 401)  # not 413: who is asking comes first
    aclient = openai.AsyncOpenAI(base_url=srv.url, api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError) as exc_info:
        asyncio.run(aclient.audio.speech.create(model="tts-1", voice="tara",
                                                input="x" * (10 * MB)))
    check_error(exc_info.value.status_code, exc_info.value.response.json(), 401)


# -- bodies that never end are still cut off -------------------------------------------------


def _endless(srv, head: bytes, chunk: bytes, pause: float) -> tuple[bytes, int, float]:
    """Send `head`, then `chunk` every `pause` s until the server ends the connection; read
    what it answers meanwhile. Returns (the answer, bytes sent, seconds until the sends
    failed)."""
    sock = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    sock.settimeout(BODY_TIMEOUT + LINGER + MARGIN)
    answer = bytearray()

    def read():
        while chunk_in := sock.recv(65536):
            answer.extend(chunk_in)

    reader = threading.Thread(target=read, daemon=True)
    started = time.monotonic()
    sent = 0
    try:
        sock.sendall(head)
        reader.start()
        while time.monotonic() - started < BODY_TIMEOUT + LINGER + MARGIN:
            sock.sendall(chunk)
            sent += len(chunk)
            if pause:
                time.sleep(pause)
    except OSError:  # the server closed: EPIPE or ECONNRESET
        pass
    took = time.monotonic() - started
    reader.join(5)
    sock.close()
    return bytes(answer), sent, took


def _status_and_error(answer: bytes) -> tuple[int, bytes, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head.lower(), json.loads(body)["error"]


def test_an_endless_oversized_body_is_answered_then_cut_off(srv):
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {1 << 40}\r\n\r\n").encode()
    answer, sent, took = _endless(srv, head, b"x" * (256 * 1024), pause=0)
    status, resp_head, error = _status_and_error(answer)
    assert status == 413 and b"connection: close" in resp_head
    assert error["code"] == "resource_exhausted"
    # cut off by http.linger_max_bytes or http.linger_seconds, whichever came first (the
    # kernel's socket buffers hold a few MB more than the server read)
    assert took < LINGER + MARGIN, took
    assert sent < LINGER_MAX_BYTES + 32 * MB, sent
    assert peak_rss(srv) - srv.baseline_hwm < MEMORY_SLACK


def test_an_endless_slow_body_gets_408_then_is_cut_off(srv):
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 500000\r\n\r\n").encode()
    answer, sent, took = _endless(srv, head, b"x" * 100, pause=0.05)
    status, _, error = _status_and_error(answer)
    assert status == 408 and "http.body_timeout_seconds" in error["message"]
    assert sent < 500000  # the body never completed
    assert took < BODY_TIMEOUT + LINGER + MARGIN, took
