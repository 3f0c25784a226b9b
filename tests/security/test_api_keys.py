"""API keys end to end: a server with TLS and a key file refuses calls without a valid key
(UNAUTHENTICATED, saying what to send), admits them with one, keeps health open, guards
reflection and GetStatus, enforces per-key limits, re-reads the file and never logs a key."""

from __future__ import annotations

import os
import queue
import threading
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from tests.e2e.server_proc import free_port

from .conftest import KEY_A, KEY_B, TlsServer, health, write_keys

SERVING = health_pb2.HealthCheckResponse.SERVING


def bearer(key: str):
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def keyed(pki, tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    keys = d / "keys.yaml"
    write_keys(keys, ("alpha", KEY_A, 1, 0), ("beta", KEY_B, 0, 2))
    metrics_port = free_port()
    srv = TlsServer(d, f"server.tls_cert_file={pki['server'].cert}",
                    f"server.tls_key_file={pki['server'].key}", f"server.api_keys_file={keys}",
                    f"server.metrics_port={metrics_port}",
                    ca_pem=pki["ca"].files.cert.read_bytes(), name="keyed")
    srv.keys_file, srv.metrics_port = keys, metrics_port
    try:
        srv.wait_serving()  # health answers over TLS without a key
        yield srv
    finally:
        srv.stop()


def test_health_is_served_over_tls_without_a_key(keyed):
    assert health(keyed.channel) == SERVING


@pytest.mark.parametrize("metadata,fragment", [
    ((), "authorization: Bearer <key>"),
    ((("authorization", "Bearer wrong"),), "not valid"),
    ((("authorization", "Token abc"),), "must be 'Bearer <key>'"),
])
def test_calls_without_a_valid_key_are_unauthenticated(keyed, metadata, fragment):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    with pytest.raises(grpc.RpcError) as exc:
        stub.ListVoices(pb.ListVoicesRequest(), metadata=metadata, timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert fragment in exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="tara"), metadata=metadata,
                             timeout=10))
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_valid_key_synthesizes(keyed):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    out = list(stub.Synthesize(pb.SynthesizeRequest(text="Hello there.", voice="tara"),
                               metadata=bearer(KEY_A), timeout=120))
    assert any(r.WhichOneof("response") == "audio" for r in out)


def test_status_and_reflection_need_a_key(keyed):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    with pytest.raises(grpc.RpcError) as exc:
        stub.GetStatus(pb.GetStatusRequest(), timeout=10)
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert stub.GetStatus(pb.GetStatusRequest(), metadata=bearer(KEY_B), timeout=10).serving

    refl = reflection_pb2_grpc.ServerReflectionStub(keyed.channel)
    ask = [reflection_pb2.ServerReflectionRequest(list_services="")]
    with pytest.raises(grpc.RpcError) as exc:
        list(refl.ServerReflectionInfo(iter(ask), timeout=10))
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    (resp,) = list(refl.ServerReflectionInfo(iter(ask), metadata=bearer(KEY_A), timeout=10))
    names = {s.name for s in resp.list_services_response.service}
    assert "orpheus.tts.v1.TTSService" in names


def test_per_key_concurrent_limit_is_resource_exhausted_and_frees_on_end(keyed):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    texts: queue.Queue = queue.Queue()

    def reqs():
        yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
        while (t := texts.get()) is not None:
            yield pb.StreamingSynthesizeRequest(text=t)
            yield pb.StreamingSynthesizeRequest(flush=pb.Flush())  # speak it now

    first = stub.StreamingSynthesize(reqs(), metadata=bearer(KEY_A), timeout=120)
    started = threading.Event()
    got = []

    def read():
        for r in first:
            got.append(r)
            started.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    texts.put("One more sentence, please.")
    assert started.wait(60)  # the first call is admitted and open
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Synthesize(pb.SynthesizeRequest(text="Two.", voice="tara"),
                             metadata=bearer(KEY_A), timeout=30))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_concurrent_sessions=1" in exc.value.details() and "alpha" in exc.value.details()
    texts.put(None)
    reader.join(120)
    assert first.code() == grpc.StatusCode.OK
    # the lease was released: the same key may open a session again
    assert list(stub.Synthesize(pb.SynthesizeRequest(text="Three.", voice="tara"),
                                metadata=bearer(KEY_A), timeout=120))


def test_per_key_sessions_per_minute(keyed):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    for _ in range(2):
        list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="tara"),
                             metadata=bearer(KEY_B), timeout=120))
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Synthesize(pb.SynthesizeRequest(text="Hi.", voice="tara"),
                             metadata=bearer(KEY_B), timeout=30))
    assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "sessions_per_minute=2" in exc.value.details()
    # the other key is not affected by beta's limit
    assert stub.ListVoices(pb.ListVoicesRequest(), metadata=bearer(KEY_A), timeout=10).voices
    body = urllib.request.urlopen(f"http://127.0.0.1:{keyed.metrics_port}/metrics",
                                  timeout=10).read().decode()
    assert 'orpheus_api_key_refused_total{key="beta",limit="sessions_per_minute"} 1.0' in body
    assert 'orpheus_api_key_sessions_total{key="beta"} 2.0' in body
    assert "orpheus_unauthenticated_total" in body


def test_the_key_file_is_reread_and_keys_never_reach_the_log(keyed):
    stub = tts_pb2_grpc.TTSServiceStub(keyed.channel)
    write_keys(keyed.keys_file, ("alpha", KEY_A, 1, 0), ("beta", KEY_B, 0, 2),
               ("gamma", "ok_new-key-gamma", 0, 0))
    os.utime(keyed.keys_file, ns=(2, 2))
    assert stub.ListVoices(pb.ListVoicesRequest(), metadata=bearer("ok_new-key-gamma"),
                           timeout=10).voices
    logs = keyed.logs()
    assert "api keys reloaded" in logs and "gamma" in logs
    for secret in (KEY_A, KEY_B, "ok_new-key-gamma", "wrong"):
        assert f"Bearer {secret}" not in logs and secret not in logs.replace("not valid", "")


def test_plaintext_clients_get_nothing_and_ignored_keys_do_not_help(keyed):
    with grpc.insecure_channel(keyed.addr) as ch:
        with pytest.raises(grpc.RpcError) as exc:
            tts_pb2_grpc.TTSServiceStub(ch).ListVoices(pb.ListVoicesRequest(),
                                                       metadata=bearer(KEY_A), timeout=3)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


def test_python_client_and_orpheus_say_over_tls_with_a_key(keyed, pki, tmp_path):
    import subprocess
    import sys
    import wave

    from orpheus_tts_client import Client, TTSError, tls_credentials

    creds = tls_credentials(str(pki["ca"].files.cert))
    with Client(keyed.addr, credentials=creds, server_name="localhost") as c:
        with pytest.raises(TTSError) as exc:
            c.list_voices()
        assert "UNAUTHENTICATED" in str(exc.value) or "Bearer" in str(exc.value)
    with Client(keyed.addr, credentials=creds, api_key=KEY_A) as c:
        assert c.list_voices()
    out = tmp_path / "x.wav"
    base = [sys.executable, "-m", "orpheus_tts_client.cli", "Hi there.", "-o", str(out),
            "--server", keyed.addr, "--ca-file", str(pki["ca"].files.cert)]
    env = {k: v for k, v in os.environ.items() if k != "ORPHEUS_API_KEY"}
    bad = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode != 0 and "Bearer" in bad.stderr
    ok = subprocess.run(base, capture_output=True, text=True, timeout=300,
                        env={**env, "ORPHEUS_API_KEY": KEY_A})
    assert ok.returncode == 0, ok.stderr
    with wave.open(str(out)) as w:
        assert w.getnframes() > 0
