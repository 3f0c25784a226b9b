"""The HTTP edge shares the gRPC edge's keys, limiter and TLS: 401/429 in OpenAI's error
shape, leases released when the response ends, HTTPS only when TLS is set."""

from __future__ import annotations

import json
import ssl

import httpx
import pytest

from orpheus_svc.security.keys import hash_key
from tests.http.inproc import InProcessServer

KEY = "ok_http-key"


@pytest.fixture(scope="module")
def https(pki):
    keys = json.dumps({"keys": [{"name": "web", "sha256": hash_key(KEY),
                                 "max_concurrent_sessions": 1}]})
    srv = InProcessServer(**{"engine.max_sessions": 4, "engine.max_batch_size": 4,
                             "server.tls_cert_file": str(pki["server"].cert),
                             "server.tls_key_file": str(pki["server"].key),
                             "server.api_keys": keys})
    srv.ca = ssl.create_default_context(cafile=str(pki["ca"].files.cert))
    srv.https = srv.http.replace("http://", "https://")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _speech(srv, key=None, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{srv.https}/v1/audio/speech", verify=srv.ca, headers=headers, timeout=120,
                      json={"model": "tts-1", "input": "Hello there.", "voice": "tara",
                            "response_format": "pcm", **kw})


def test_http_without_a_key_is_401_in_openais_shape(https):
    r = _speech(https)
    assert r.status_code == 401
    err = r.json()["error"]
    assert err["type"] == "authentication_error" and err["code"] == "unauthenticated"
    assert "Bearer <key>" in err["message"]
    r = httpx.get(f"{https.https}/v1/models", verify=https.ca,
                  headers={"Authorization": "Bearer wrong"}, timeout=30)
    assert r.status_code == 401


def test_http_with_the_key_speaks_and_releases_its_lease(https):
    for _ in range(2):  # max_concurrent_sessions=1: the second works only if the first released
        r = _speech(https, KEY)
        assert r.status_code == 200 and len(r.content) > 0
    assert https.server.auth.limiter.snapshot()["web"]["active"] == 0


def test_http_concurrent_limit_is_429(https):
    lease, _ = https.server.auth.limiter.acquire(
        https.server.auth.store.authenticate(f"Bearer {KEY}").key)  # a session held elsewhere
    try:
        r = _speech(https, KEY)
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert "max_concurrent_sessions=1" in r.json()["error"]["message"]
    finally:
        lease.release()


def test_http_edge_is_https_only_when_tls_is_set(https):
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{https.http}/v1/models", timeout=10)
