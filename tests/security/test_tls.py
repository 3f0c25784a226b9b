"""TLS and mTLS on the gRPC port with real certificates: handshakes succeed and fail where
they must, no plaintext port, and certificate rotation without dropping a call in flight."""

from __future__ import annotations

import queue
import shutil
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from .conftest import TlsServer, health, tls_channel

SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def tls_server(pki, tmp_path_factory):
    srv = TlsServer(tmp_path_factory.mktemp("tls-logs"),
                    f"server.tls_cert_file={pki['server'].cert}",
                    f"server.tls_key_file={pki['server'].key}",
                    ca_pem=pki["ca"].files.cert.read_bytes())
    try:
        srv.wait_serving()
        yield srv
    finally:
        srv.stop()


def _code(result):
    assert isinstance(result, grpc.RpcError), f"expected a failed handshake, got {result!r}"
    return result.code()


def test_tls_handshake_with_the_right_ca_serves(tls_server):
    assert health(tls_server.channel) == SERVING
    voices = tts_pb2_grpc.TTSServiceStub(tls_server.channel).ListVoices(pb.ListVoicesRequest(),
                                                                         timeout=10)
    assert len(voices.voices) > 0


def test_plaintext_is_refused_when_tls_is_set(tls_server):
    with grpc.insecure_channel(tls_server.addr) as ch:
        assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE


def test_a_client_trusting_another_ca_fails_the_handshake(tls_server, pki):
    with tls_channel(tls_server.addr, pki["other_ca"].files.cert.read_bytes()) as ch:
        assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE


def test_server_name_override_must_match_the_certificate(tls_server, pki):
    ca = pki["ca"].files.cert.read_bytes()
    with tls_channel(tls_server.addr, ca, server_name="localhost") as ch:
        assert health(ch) == SERVING
    with tls_channel(tls_server.addr, ca, server_name="elsewhere.example") as ch:
        assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("which", ["expired", "wrong_host"])
def test_expired_or_wrong_host_server_certificates_fail(pki, tmp_path, which):
    srv = TlsServer(tmp_path, f"server.tls_cert_file={pki[which].cert}",
                    f"server.tls_key_file={pki[which].key}",
                    ca_pem=pki["ca"].files.cert.read_bytes(), name=which)
    try:
        srv.wait_listening()
        with tls_channel(srv.addr, pki["ca"].files.cert.read_bytes(),
                         server_name="localhost") as ch:
            assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE
        assert srv.proc.poll() is None, srv.logs()  # refused handshakes do not hurt the server
    finally:
        srv.stop()


def test_a_mismatched_key_is_a_clear_startup_error(pki, tmp_path):
    srv = TlsServer(tmp_path, f"server.tls_cert_file={pki['server'].cert}",
                    f"server.tls_key_file={pki['client'].key}",
                    ca_pem=pki["ca"].files.cert.read_bytes(), name="mismatch")
    try:
        assert srv.wait_exit(60) == 2
        assert "not a matching certificate and key" in srv.logs()
    finally:
        srv.stop()


def test_mtls_refuses_a_client_without_a_certificate_or_with_a_strangers(pki, tmp_path):
    srv = TlsServer(tmp_path, f"server.tls_cert_file={pki['server'].cert}",
                    f"server.tls_key_file={pki['server'].key}",
                    f"server.tls_client_ca_file={pki['ca'].files.cert}",
                    ca_pem=pki["ca"].files.cert.read_bytes(), client=pki["client"], name="mtls")
    try:
        srv.wait_serving()
        ca = pki["ca"].files.cert.read_bytes()
        with tls_channel(srv.addr, ca) as ch:
            assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE
        with tls_channel(srv.addr, ca, client=pki["stranger"]) as ch:
            assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE
        with tls_channel(srv.addr, ca, client=pki["client"]) as ch:
            assert health(ch) == SERVING
    finally:
        srv.stop()


def test_rotation_keeps_a_call_in_flight_and_new_calls_get_the_new_certificate(pki, tmp_path):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki["server"].cert, cert)
    shutil.copy(pki["server"].key, key)
    old_ca = pki["ca"].files.cert.read_bytes()
    new_ca = pki["other_ca"].files.cert.read_bytes()
    srv = TlsServer(tmp_path, f"server.tls_cert_file={cert}", f"server.tls_key_file={key}",
                    ca_pem=old_ca, name="rotate")
    try:
        srv.wait_serving()
        with tls_channel(srv.addr, new_ca) as ch:  # not yet: the server has the old cert
            assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE
        # a streaming call opened with the old certificate, waiting for its text
        texts: queue.Queue = queue.Queue()

        def reqs():
            yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
            while (t := texts.get()) is not None:
                yield pb.StreamingSynthesizeRequest(text=t)

        stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
        call = stub.StreamingSynthesize(reqs(), timeout=120)
        got: list = []
        reader = threading.Thread(target=lambda: got.extend(call), daemon=True)
        reader.start()
        texts.put("Hello before the rotation.")
        # rotate: new pair (another CA) written in place
        shutil.copy(pki["rotated"].cert, cert)
        shutil.copy(pki["rotated"].key, key)
        with tls_channel(srv.addr, new_ca) as ch:
            assert health(ch) == SERVING  # a new connection gets the new certificate
        with tls_channel(srv.addr, old_ca) as ch:
            assert _code(health(ch, 3)) == grpc.StatusCode.UNAVAILABLE
        texts.put("And after it.")
        texts.put(None)
        reader.join(120)
        assert not reader.is_alive()
        assert call.code() == grpc.StatusCode.OK
        kinds = [r.WhichOneof("response") for r in got]
        assert kinds[-1] == "summary" and kinds.count("audio") > 0
        assert "tls certificate reloaded" in srv.logs()
    finally:
        srv.stop()
